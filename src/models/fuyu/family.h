// The Fuyu family (FuyuForCausalLM, "fuyu") as the registry sees it.
#pragma once

#include "models/model.h"

namespace mmrt::models::fuyu {

const ModelFamily& family();

}  // namespace mmrt::models::fuyu
