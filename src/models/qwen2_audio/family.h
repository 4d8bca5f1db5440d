// The Qwen2-Audio family (Qwen2AudioForConditionalGeneration) as the registry sees it.
#pragma once

#include "models/model.h"

namespace mmrt::models::qwen2_audio {

const ModelFamily& family();

}  // namespace mmrt::models::qwen2_audio
