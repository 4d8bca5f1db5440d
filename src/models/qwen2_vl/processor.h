// Qwen2-VL prompt processing after tokenization: expands each <|image_pad|> placeholder into the
// image's token count and assigns M-RoPE position ids exactly as HF get_rope_index does.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "io/hf_config.h"
#include "models/qwen2_vl/vision_tower.h"

namespace mmrt::models {

struct ImageSpan {
  int64_t begin = 0;     // index of the first <|image_pad|> of this image in ids
  int64_t n_tokens = 0;  // merged tokens: t * (h/merge) * (w/merge)
};

struct MultimodalPrompt {
  std::vector<int32_t> ids;        // [S], image pads expanded
  std::vector<int32_t> positions;  // [3, S]: t row, h row, w row
  int32_t rope_delta = 0;          // decode position = cache index + rope_delta
  std::vector<ImageSpan> images;   // in order
};

// `ids` holds one <|image_pad|> per image (as the chat template renders it); grids[i] is image
// i's (t, h, w) patch grid. Throws InvalidArgument when placeholders and grids disagree.
MultimodalPrompt expand_image_prompt(std::span<const int32_t> ids, std::span<const GridThw> grids,
                                     const io::Qwen2VLConfig& cfg);

// get_rope_index for an already expanded sequence: positions [3, S] and rope_delta.
void qwen2_vl_rope_index(std::span<const int32_t> ids, std::span<const GridThw> grids,
                         const io::Qwen2VLConfig& cfg, std::vector<int32_t>& positions,
                         int32_t& rope_delta);

}  // namespace mmrt::models
