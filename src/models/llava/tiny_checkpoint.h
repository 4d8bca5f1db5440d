// Writes a complete random LLaVA-NeXT or LLaVA-1.5 checkpoint folder in the exact Hugging Face
// layout (config.json with text_config / vision_config, model.safetensors or shards + index,
// tokenizer.json (SentencePiece-style BPE with byte fallback, <image> at 32000 and <pad> at
// 32001 as in llava-hf's), tokenizer_config.json with the chat template, generation_config.json,
// preprocessor_config.json, processor_config.json) on the shared tiny writer.
#pragma once

#include <cstdint>
#include <string>

#include "models/llava/config.h"
#include "models/model.h"

namespace mmrt::models::llava {

enum class TinySize {
  // Text hidden 64, 2 layers, 4 heads (2 KV heads for Mistral, 4 for Llama); CLIP hidden 32,
  // 3 layers (the last skipped by vision_feature_layer -2), 2 heads, images of 112 with patch 14
  // (8x8 patches a crop), the default pinpoints scaled by 112/336 (unit and reference tests).
  kTiny,
  // LLaVA-v1.6-Mistral-7B's (or LLaVA-1.5-7B's) shapes with 4 decoder layers instead of 32:
  // every per-layer matrix, the 32064-row vocabulary, the whole CLIP ViT-L/14-336 and the
  // projector at full size (~1.5 B parameters, ~3 GB in bf16), for `mmrt bench-model`.
  k7bShape4Layers,
};
// "tiny" | "7b-shape-4l"; InvalidArgument else.
TinySize parse_tiny_size(const std::string& s);
const char* tiny_size_name(TinySize s);

// The preset's dimensions; `next` picks LLaVA-NeXT on Mistral, else LLaVA-1.5 on Llama/Vicuna.
Config tiny_base_config(TinySize size, bool next);

// make-tiny-model --arch llava-next / llava. opts.naming "old" (default) or "new".
TinyModelResult make_tiny_checkpoint(const std::string& out_dir, const TinyModelOptions& opts,
                                     bool next);

}  // namespace mmrt::models::llava
