// The one table of tensors a Qwen2.5-VL checkpoint holds (names and shapes from config.json) and
// the checker every loader and `mmrt inspect` runs. The text model is Qwen2-VL's decoder; the
// names follow Qwen2-VL's conventions (old `model.*` / `visual.*` or new
// `model.language_model.*` / `model.visual.*`).
#pragma once

#include <vector>

#include "io/safetensors.h"
#include "models/checkpoint.h"
#include "models/qwen2_5_vl/config.h"
#include "models/qwen2_vl/weights_spec.h"

namespace mmrt::models::qwen2_5_vl {

// Every tensor of Qwen2_5_VLForConditionalGeneration with its canonical (old-style) name: the
// decoder's (lm_head omitted when `tied`), then the vision tower's.
std::vector<ExpectedTensor> expected_tensors(const Config& cfg, bool tied);

// Detects the layout and checks every tensor against cfg.
qwen2_vl::Layout check_checkpoint(const io::SafeTensors& st, const Config& cfg);

}  // namespace mmrt::models::qwen2_5_vl
