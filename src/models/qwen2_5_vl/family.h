// The Qwen2.5-VL family (Qwen2_5_VLForConditionalGeneration) as the registry sees it: Qwen2-VL's
// decoder, processor, chat template and tensor naming, its own vision tower and config.
#pragma once

#include "models/model.h"

namespace mmrt::models::qwen2_5_vl {

const ModelFamily& family();

}  // namespace mmrt::models::qwen2_5_vl
