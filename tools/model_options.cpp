#include "model_options.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/isa.h"

namespace mmrt::cli {

models::LoadOptions load_options(Args& args) {
  models::LoadOptions o;
  using WF = kernels::WeightFormat;
  o.weight_format = args.get_choice<std::optional<WF>>(
      "weights", "auto",
      {{"auto", std::nullopt}, {"f32", WF::kF32}, {"bf16", WF::kBF16}, {"int8", WF::kInt8}});
  if (args.flag("map-weights")) o.weight_placement = kernels::WeightPlacement::kViewIfPossible;
  o.int8_activations = args.get_choice<kernels::Int8Activations>(
      "int8-activations", "q8",
      {{"q8", kernels::Int8Activations::kQ8}, {"float", kernels::Int8Activations::kFloat}});
  return o;
}

engine::KvOptions kv_options(Args& args) {
  engine::KvOptions o;
  o.dtype =
      args.get_choice<DType>("kv-dtype", "bf16", {{"bf16", DType::kBF16}, {"f32", DType::kF32}});
  const int64_t mb = args.get_int("kv-mb", 256);
  if (mb < 1 || mb > (int64_t{1} << 24))
    throw InvalidArgument("--kv-mb must be in 1..16777216 (MiB), got " + std::to_string(mb));
  o.bytes = static_cast<uint64_t>(mb) << 20;
  return o;
}

int thread_count_option(Args& args) {
  int64_t def = 0;
  if (const char* t = std::getenv("MMRT_THREADS")) {
    char* end = nullptr;
    const long v = std::strtol(t, &end, 10);
    if (!*t || *end || v < 1 || v > 4096)
      throw InvalidArgument("MMRT_THREADS must be a thread count in 1..4096, got '" +
                            std::string(t) + "'");
    def = v;
  }
  const int64_t threads = args.get_int("threads", def);
  if (threads < 0 || threads > 4096)
    throw InvalidArgument("--threads must be in 1..4096 (0: every CPU), got " +
                          std::to_string(threads));
  return static_cast<int>(threads);
}

kernels::BackendOptions backend_options(Args& args) {
  kernels::BackendOptions o;
  o.threads = thread_count_option(args);
  if (auto isa = args.get("isa")) {
    auto v = parse_isa(*isa);
    if (!v)
      throw InvalidArgument("--isa must be portable, avx2, avx512 or avx512bf16, got '" + *isa +
                            "'");
    if (!isa_supported(*v))
      throw InvalidArgument("--isa " + *isa + ": this CPU does not support it (best: " +
                            std::string(isa_name(best_isa())) + ")");
    o.max_isa = *v;
  }
  return o;
}

}  // namespace mmrt::cli
