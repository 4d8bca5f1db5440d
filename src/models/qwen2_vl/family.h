// The Qwen2-VL family (Qwen2VLForConditionalGeneration) as the registry sees it.
#pragma once

#include "models/model.h"

namespace mmrt::models::qwen2_vl {

const ModelFamily& family();

}  // namespace mmrt::models::qwen2_vl
