#include "model_options.h"

#include "core/error.h"
#include "core/thread_pool.h"

namespace mmrt::cli {

models::LanguageModelOptions language_model_options(Args& args) {
  models::LanguageModelOptions o;
  std::string w = args.get_or("weights", "auto");
  if (w == "f32")
    o.weight_format = kernels::WeightFormat::kF32;
  else if (w == "bf16")
    o.weight_format = kernels::WeightFormat::kBF16;
  else if (w == "int8")
    o.weight_format = kernels::WeightFormat::kInt8;
  else if (w != "auto")
    throw InvalidArgument("--weights must be auto, f32, bf16 or int8, got '" + w + "'");
  if (args.flag("map-weights")) o.weight_placement = kernels::WeightPlacement::kViewIfPossible;
  std::string ia = args.get_or("int8-activations", "q8");
  if (ia == "q8")
    o.int8_activations = kernels::Int8Activations::kQ8;
  else if (ia == "float")
    o.int8_activations = kernels::Int8Activations::kFloat;
  else
    throw InvalidArgument("--int8-activations must be q8 or float, got '" + ia + "'");
  std::string kv = args.get_or("kv-dtype", "bf16");
  if (kv == "bf16")
    o.kv_dtype = DType::kBF16;
  else if (kv == "f32")
    o.kv_dtype = DType::kF32;
  else
    throw InvalidArgument("--kv-dtype must be bf16 or f32, got '" + kv + "'");
  int64_t mb = args.get_int("kv-mb", 256);
  if (mb < 1) throw InvalidArgument("--kv-mb must be >= 1");
  o.kv_bytes = static_cast<uint64_t>(mb) << 20;
  int64_t threads = args.get_int("threads", 0);
  if (threads < 0) throw InvalidArgument("--threads must be >= 1");
  if (threads > 0) ThreadPool::set_global_threads(static_cast<int>(threads));
  return o;
}

}  // namespace mmrt::cli
