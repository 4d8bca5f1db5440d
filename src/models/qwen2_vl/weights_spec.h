// The one table of tensors a Qwen2-VL checkpoint holds (names and shapes from config.json), and a
// checker that compares an opened checkpoint against it. Used by the tiny-checkpoint generator,
// `mmrt inspect` and the model loader.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace mmrt::models {

struct ExpectedTensor {
  std::string canonical_name;  // old-style HF name: model.*, visual.*, lm_head.weight
  Shape shape;
};

// Every text and vision tensor of Qwen2VLForConditionalGeneration, in module order: embeddings,
// decoder layers, final norm, lm_head (omitted when `tied`), then the vision tower. Map names to
// a checkpoint's convention with io::qwen2_vl_tensor_name.
std::vector<ExpectedTensor> qwen2_vl_expected_tensors(const io::Qwen2VLConfig& cfg, bool tied);

// True for LayerNorm / RMSNorm parameters (".weight" initialised to 1, ".bias" to 0).
bool qwen2_vl_is_norm_param(const std::string& canonical_name);

// Detects the naming convention, treats a missing lm_head.weight as tied, and throws FormatError
// listing missing / unexpected / wrong-shape / unsupported-dtype tensors (the first few of each,
// with counts). Supported dtypes: F32, F16, BF16.
void check_qwen2_vl_checkpoint(const io::SafeTensors& st, const io::Qwen2VLConfig& cfg);

}  // namespace mmrt::models
