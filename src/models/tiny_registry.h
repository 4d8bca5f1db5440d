// The tiny-checkpoint writers of the families (make-tiny-model, the tests): one table, next to the
// families' registry (models/registry.h) but in a library of its own, mmrt_tiny, that the served
// libraries do not link (src/models/CMakeLists.txt).
#pragma once

#include <string>

#include "models/model.h"

namespace mmrt::models {

// Writes a tiny random checkpoint of `family` in its exact Hugging Face layout
// (ModelFamily::tiny_sizes lists its sizes). InvalidArgument when the family has no writer.
TinyModelResult make_tiny_model(const ModelFamily& family, const std::string& dir,
                                const TinyModelOptions& opts);

}  // namespace mmrt::models
