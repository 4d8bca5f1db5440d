#include "model_options.h"

#include <optional>

#include "core/error.h"
#include "core/thread_pool.h"

namespace mmrt::cli {

models::LanguageModelOptions language_model_options(Args& args) {
  models::LanguageModelOptions o;
  using WF = kernels::WeightFormat;
  o.weight_format = args.get_choice<std::optional<WF>>(
      "weights", "auto",
      {{"auto", std::nullopt}, {"f32", WF::kF32}, {"bf16", WF::kBF16}, {"int8", WF::kInt8}});
  if (args.flag("map-weights")) o.weight_placement = kernels::WeightPlacement::kViewIfPossible;
  o.int8_activations = args.get_choice<kernels::Int8Activations>(
      "int8-activations", "q8",
      {{"q8", kernels::Int8Activations::kQ8}, {"float", kernels::Int8Activations::kFloat}});
  o.kv_dtype =
      args.get_choice<DType>("kv-dtype", "bf16", {{"bf16", DType::kBF16}, {"f32", DType::kF32}});
  int64_t mb = args.get_int("kv-mb", 256);
  if (mb < 1) throw InvalidArgument("--kv-mb must be >= 1");
  o.kv_bytes = static_cast<uint64_t>(mb) << 20;
  int64_t threads = args.get_int("threads", 0);
  if (threads < 0) throw InvalidArgument("--threads must be >= 1");
  if (threads > 0) ThreadPool::set_global_threads(static_cast<int>(threads));
  return o;
}

}  // namespace mmrt::cli
