// Random Qwen2.5-VL checkpoints in the exact Hugging Face layout, written by Qwen2-VL's writer
// (the same tokenizer, chat template, generation and preprocessor configs) with this family's
// config.json and tensors.
#pragma once

#include <string>

#include "models/model.h"
#include "models/qwen2_5_vl/config.h"

namespace mmrt::models::qwen2_5_vl {

// The presets: "tiny" (unit tests: hidden 64, 2 layers; vision depth 4 with full attention in
// blocks 1 and 3, width 32), "small" (a 2-core benchmark: hidden 768, 12 layers; vision depth 8,
// width 384), "3b-shape-4l" (Qwen2.5-VL-3B's dimensions with 4 of its 36 text layers: the whole
// vision tower, the real vocabulary). InvalidArgument for another name.
Config tiny_base_config(const std::string& size);

// make-tiny-model's entry (models/tiny_registry.h).
TinyModelResult make_tiny_model(const std::string& out_dir, const TinyModelOptions& opts);

}  // namespace mmrt::models::qwen2_5_vl
