#include "models/tiny_registry.h"

#include <string_view>

#include "core/error.h"
#include "models/fuyu/tiny_checkpoint.h"
#include "models/llava/tiny_checkpoint.h"
#include "models/qwen2_5_vl/tiny_checkpoint.h"
#include "models/qwen2_audio/tiny_checkpoint.h"
#include "models/qwen2_vl/tiny_checkpoint.h"

namespace mmrt::models {

namespace {

TinyModelResult llava_next(const std::string& dir, const TinyModelOptions& o) {
  return llava::make_tiny_checkpoint(dir, o, true);
}
TinyModelResult llava_15(const std::string& dir, const TinyModelOptions& o) {
  return llava::make_tiny_checkpoint(dir, o, false);
}

struct Writer {
  std::string_view family;  // ModelFamily::name
  TinyModelResult (*make)(const std::string& dir, const TinyModelOptions& opts);
};

// One line per family, as in registry.cpp.
constexpr Writer kWriters[] = {
    {"qwen2-vl", &qwen2_vl::make_tiny_model},
    {"qwen2.5-vl", &qwen2_5_vl::make_tiny_model},
    {"qwen2-audio", &qwen2_audio::make_tiny_model},
    {"llava-next", &llava_next},
    {"llava", &llava_15},
    {"fuyu", &fuyu::make_tiny_checkpoint},
};

}  // namespace

TinyModelResult make_tiny_model(const ModelFamily& family, const std::string& dir,
                                const TinyModelOptions& opts) {
  for (const Writer& w : kWriters)
    if (w.family == family.name) return w.make(dir, opts);
  throw InvalidArgument(std::string("no tiny-checkpoint writer for the ") + family.name +
                        " family");
}

}  // namespace mmrt::models
