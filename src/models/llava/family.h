// The LLaVA families as the registry sees them: LLaVA-NeXT / 1.6
// (LlavaNextForConditionalGeneration, "llava-next") and LLaVA-1.5
// (LlavaForConditionalGeneration, "llava"). One loader serves both; the config says which.
#pragma once

#include "models/model.h"

namespace mmrt::models::llava {

const ModelFamily& next_family();
const ModelFamily& family();

}  // namespace mmrt::models::llava
