// Writes a complete random Fuyu checkpoint folder in the exact Hugging Face layout (config.json
// with the flat FuyuConfig fields and text_config, model.safetensors or shards + index,
// tokenizer.json (a Unigram model with byte fallback in adept/fuyu-8b's layout: |SPEAKER|,
// |NEWLINE| and |ENDOFTEXT| vocabulary pieces), tokenizer_config.json, generation_config.json,
// preprocessor_config.json) on the shared tiny writer.
#pragma once

#include <string>

#include "models/fuyu/weights_spec.h"
#include "models/model.h"

namespace mmrt::models::fuyu {

enum class TinySize {
  // Hidden 64, 2 layers, 4 heads (head_dim 16, 8 rotated dims), intermediate 128, 30x30 patches.
  kTiny,
  // Fuyu-8B's shapes with 4 decoder layers instead of 36: every per-layer matrix, the
  // 262144-row vocabulary (embedding and head) and the patch embedding at full size (~2.9 B
  // parameters, ~5.9 GB in bf16), for `mmrt bench-model`.
  k8bShape4Layers,
};
TinySize parse_tiny_size(const std::string& s);  // "tiny" | "8b-shape-4l"
const char* tiny_size_name(TinySize s);
Config tiny_base_config(TinySize size);

TinyModelResult make_tiny_checkpoint(const std::string& out_dir, const TinyModelOptions& opts);

}  // namespace mmrt::models::fuyu
