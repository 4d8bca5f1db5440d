#include "model_options.h"

#include "kernels/registry.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/isa.h"
#include "media/image.h"

namespace mmrt::cli {

models::LoadOptions load_options(Args& args) {
  models::LoadOptions o;
  using WF = kernels::WeightFormat;
  o.weight_format = args.get_choice<std::optional<WF>>("weights", "auto",
                                                       {{"auto", std::nullopt},
                                                        {"f32", WF::kF32},
                                                        {"bf16", WF::kBF16},
                                                        {"int8", WF::kInt8},
                                                        {"fp8", WF::kFp8}});
  if (args.flag("map-weights")) o.weight_placement = kernels::WeightPlacement::kViewIfPossible;
  o.int8_activations = args.get_choice<kernels::Int8Activations>(
      "int8-activations", "q8",
      {{"q8", kernels::Int8Activations::kQ8}, {"float", kernels::Int8Activations::kFloat}});
  o.int8_prefill = args.get_choice<kernels::Int8Gemm>(
      "int8-prefill", "bf16",
      {{"bf16", kernels::Int8Gemm::kBF16}, {"q8", kernels::Int8Gemm::kQ8Row}});
  o.encoder_weights = args.get_choice<std::string>(
      "encoder-weights", "auto", {{"auto", "auto"}, {"bf16", "bf16"}, {"int8", "int8"}});
  o.encoder_keep_last = args.get_int("encoder-keep-last", 3, 0, 1000);
  o.long_audio = long_audio_option(args);
  return o;
}

models::LoadOptions::LongAudio long_audio_option(Args& args) {
  using LA = models::LoadOptions::LongAudio;
  return args.get_choice<LA>("long-audio", "split",
                             {{"split", LA::kSplit}, {"refuse", LA::kRefuse}});
}

engine::KvOptions kv_options(Args& args) {
  engine::KvOptions o;
  o.dtype =
      args.get_choice<DType>("kv-dtype", "bf16", {{"bf16", DType::kBF16}, {"f32", DType::kF32}});
  const bool mb_given = args.get("kv-mb").has_value();
  const bool fraction_given = args.get("gpu-memory-fraction").has_value();
  if (mb_given && fraction_given)
    throw InvalidArgument("--kv-mb and --gpu-memory-fraction both size the KV cache: give one");
  const int64_t mb = args.get_int("kv-mb", 256, 1, int64_t{1} << 24);
  o.bytes = static_cast<uint64_t>(mb) << 20;
  // A GPU's cache is sized from its memory unless --kv-mb says otherwise (the CPU ignores it).
  o.device_fraction = mb_given ? 0.0 : args.get_double("gpu-memory-fraction", 0.9, 0.05, 1.0);
  return o;
}

io::FileLimit image_file_limit(Args& args) {
  const int64_t n = args.get_int("max-image-bytes", 64 << 20, 1, int64_t{1} << 32);
  return {.what = "image", .max_bytes = static_cast<uint64_t>(n), .option = "--max-image-bytes"};
}

io::FileLimit audio_file_limit(Args& args) {
  const int64_t n = args.get_int("max-audio-bytes", 64 << 20, 1, int64_t{1} << 32);
  return {
      .what = "audio file", .max_bytes = static_cast<uint64_t>(n), .option = "--max-audio-bytes"};
}

io::FileLimit video_file_limit(Args& args) {
  const int64_t n = args.get_int("max-video-bytes", 256 << 20, 1, int64_t{1} << 32);
  return {
      .what = "video file", .max_bytes = static_cast<uint64_t>(n), .option = "--max-video-bytes"};
}

int64_t max_source_pixels_option(Args& args) {
  return args.get_int("max-source-pixels", static_cast<int64_t>(media::DecodeOptions{}.max_pixels),
                      1, int64_t{1} << 31);
}

int32_t step_tokens_option(Args& args) {
  return static_cast<int32_t>(args.get_int("step-tokens", 512, 16, 65536));
}

int max_threads() {
  return std::max(64, 4 * static_cast<int>(std::thread::hardware_concurrency()));
}

int thread_count_option(Args& args) {
  int64_t def = 0;
  const int hi = max_threads();
  if (const char* t = std::getenv("MMRT_THREADS")) {
    const std::optional<int64_t> v = parse_int(t);
    if (!v || *v < 1 || *v > hi)
      throw InvalidArgument("MMRT_THREADS must be a thread count in 1.." + std::to_string(hi) +
                            ", got '" + std::string(t).substr(0, 40) + "'");
    def = *v;
  }
  return static_cast<int>(args.get_int("threads", def, 0, hi));
}

sandbox::MediaSandboxConfig media_sandbox_options(Args& args, const std::string& model_dir) {
  sandbox::MediaSandboxConfig c;
  c.enabled = args.get_choice<bool>("media-sandbox", "on", {{"on", true}, {"off", false}});
  c.model_dir = model_dir;
  c.memory_bytes = args.get_int("media-memory-mb", 1024, 16, 65536) << 20;
  c.cpu_seconds = static_cast<int32_t>(args.get_int("media-cpu-seconds", 10, 1, 3600));
  c.timeout_s = args.get_double("media-timeout", 30, 0.1, 3600);
  return c;
}

ComputeOptions compute_options(Args& args) {
  ComputeOptions c;
  if (auto d = args.get("device")) c.device = parse_device(*d);
  kernels::BackendOptions& o = c.backend;
  o.threads = thread_count_option(args);
  o.batch_invariant = args.flag("batch-invariant");
  c.step_graph_rows = static_cast<int32_t>(args.get_int("step-graphs", 64, 0, 4096));
  if (auto isa = args.get("isa")) {
    auto v = parse_isa(*isa);
    if (!v)
      throw InvalidArgument("--isa must be portable, avx2, avx512 or avx512bf16, got '" + *isa +
                            "'");
    if (!isa_supported(*v))
      throw InvalidArgument("--isa " + *isa + ": this CPU does not support it (best: " +
                            std::string(isa_name(best_isa())) + ")");
    o.max_isa = *v;
    c.host.max_isa = *v;
  }
  return c;
}

std::unique_ptr<kernels::Backend> make_backend(const ComputeOptions& o) {
  return kernels::create_backend(o.device, o.backend);
}

void set_compute(engine::EngineConfig& cfg, const ComputeOptions& o) {
  cfg.device = o.device;
  cfg.backend = o.backend;
  cfg.host = o.host;
  cfg.step_graphs.max_rows = o.step_graph_rows;
}

void apply_policy_option(const std::string& value, engine::EngineConfig& cfg) {
  const size_t colon = value.find(':');
  cfg.policy = value.substr(0, colon);
  const std::string modifier = colon == std::string::npos ? "" : value.substr(colon + 1);
  if (modifier == "plain") {
    cfg.admission_control = false;
    cfg.batch_controller = false;
  } else if (modifier == "reserve" && cfg.policy == "slo") {
    cfg.admission_reserve = true;
  } else if (modifier == "safe") {
    cfg.admission_safety = true;
  } else if (!modifier.empty()) {
    throw InvalidArgument("--policy entry '" + value +
                          "': the modifiers are ':plain' and ':safe' (any policy) and ':reserve' "
                          "(slo)");
  }
  engine::make_policy(cfg.policy);  // validates the name
}

}  // namespace mmrt::cli
