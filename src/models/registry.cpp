#include "models/registry.h"

#include <array>
#include <filesystem>

#include "core/error.h"
#include "io/json_fields.h"
#include "models/checkpoint.h"
#include "models/fuyu/family.h"
#include "models/llava/family.h"
#include "models/qwen2_5_vl/family.h"
#include "models/qwen2_audio/family.h"
#include "models/qwen2_vl/family.h"

namespace fs = std::filesystem;

namespace mmrt::models {

namespace {

// Adding a family: its folder, and one line here.
const std::array<const ModelFamily*, 6>& table() {
  static const std::array<const ModelFamily*, 6> t{&qwen2_vl::family(),    &qwen2_5_vl::family(),
                                                   &qwen2_audio::family(), &llava::next_family(),
                                                   &llava::family(),       &fuyu::family()};
  return t;
}

}  // namespace

std::span<const ModelFamily* const> families() {
  return table();
}

std::string supported_architectures() {
  std::string s;
  for (const ModelFamily* f : families())
    for (const auto& a : f->architectures) s += (s.empty() ? "" : ", ") + a + " (" + f->name + ")";
  return s;
}

const ModelFamily& family_for_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw NotFound("model folder '" + dir + "' " +
                   (fs::exists(dir, ec) ? "is not a directory" : "does not exist"));
  const fs::path cfg = fs::path(dir) / "config.json";
  if (!fs::exists(cfg, ec)) throw NotFound("model folder '" + dir + "' has no config.json");
  const std::string origin = cfg.string();
  const io::ConfigIdentity id =
      io::config_identity(io::parse_json_object(io::read_text_file(origin), origin), origin);
  for (const ModelFamily* f : families()) {
    for (const auto& a : f->architectures)
      if (a == id.architecture) return *f;
    if (id.architecture.empty())
      for (const auto& t : f->model_types)
        if (t == id.model_type) return *f;
  }
  const std::string what = !id.architecture.empty() ? "architecture \"" + id.architecture + "\""
                           : !id.model_type.empty()
                               ? "model_type \"" + id.model_type + "\" (and no \"architectures\")"
                               : "no \"architectures\" or \"model_type\"";
  throw Unimplemented(origin + ": " + what +
                      " is not supported; supported: " + supported_architectures());
}

const ModelFamily& family_named(const std::string& name) {
  std::string names;
  for (const ModelFamily* f : families()) {
    if (name == f->name) return *f;
    names += (names.empty() ? "" : ", ") + std::string(f->name);
  }
  throw InvalidArgument("unknown model family '" + name + "' (available: " + names + ")");
}

std::unique_ptr<Processor> load_processor(const std::string& dir) {
  return family_for_checkpoint(dir).load_processor(dir);
}

Model load_model(const ModelFamily& family, const kernels::Backend& be, const std::string& dir,
                 const LoadOptions& opts) {
  be.require(family.ops, std::string("a ") + family.name + " model");
  if (opts.weight_format == kernels::WeightFormat::kFp8 && be.device().is_host())
    throw InvalidArgument(
        "--weights fp8 computes on CUDA devices (Hopper's FP8); the CPU has "
        "int8 and bf16 (--weights int8|bf16)");
  Model m = family.load(be, dir, opts);
  m.spec.weights_key = weights_fingerprint(dir);
  return m;
}

Model load_model(const kernels::Backend& be, const std::string& dir, const LoadOptions& opts) {
  return load_model(family_for_checkpoint(dir), be, dir, opts);
}

}  // namespace mmrt::models
