// Qwen2-VL's request side: the chat template, image estimates from the header, preprocessing
// with the checkpoint's preprocessor_config.json, <|image_pad|> expansion and M-RoPE position
// ids exactly as HF get_rope_index computes them.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "models/model.h"
#include "models/qwen2_vl/config.h"
#include "models/qwen2_vl/image_processor.h"
#include "models/qwen2_vl/video_processor.h"

namespace mmrt::models::qwen2_vl {

struct ItemSpan {
  int64_t begin = 0;     // index of the first pad token of this item in ids
  int64_t n_tokens = 0;  // merged tokens: t * (h/merge) * (w/merge)
};

struct MultimodalPrompt {
  std::vector<int32_t> ids;        // [S], image and video pads expanded
  std::vector<int32_t> positions;  // [3, S]: t row, h row, w row
  int32_t rope_delta = 0;          // decode position = cache index + rope_delta
  std::vector<ItemSpan> items;     // in order
};

// One media item of a prompt: an image (<|image_pad|>) or a video (<|video_pad|>) and its patch
// grid. The temporal position of slice t is int64(f32(f32(t * second_per_grid) *
// tokens_per_second)), in float32 as HF's get_rope_index computes it: t itself for Qwen2-VL (1,
// 1); for a Qwen2.5-VL video, the seconds one slice spans (temporal_patch_size / the sampling
// fps) and vision_config.tokens_per_second, so that time, not the slice count, places it.
// `kept` (video token pruning): the indices of the tokens kept among the grid's, strictly
// increasing; each keeps its own (t, h, w) position and the text after the item is placed as if
// none were dropped. Empty: every token.
struct MediaGrid {
  Modality modality = Modality::kImage;
  GridThw grid{1, 0, 0};
  float second_per_grid = 1.0f;
  int64_t tokens_per_second = 1;
  std::span<const int32_t> kept = {};
};

// `ids` holds one pad per item (as the chat template renders it), items in prompt order. Throws
// InvalidArgument when placeholders and items disagree (count or kind).
MultimodalPrompt expand_media_prompt(std::span<const int32_t> ids, std::span<const MediaGrid> items,
                                     const Config& cfg);
// The same for images only (grids[i] is image i's (t, h, w)).
MultimodalPrompt expand_image_prompt(std::span<const int32_t> ids, std::span<const GridThw> grids,
                                     const Config& cfg);

// get_rope_index for an already expanded sequence: positions [3, S] and rope_delta.
void rope_index(std::span<const int32_t> ids, std::span<const MediaGrid> items, const Config& cfg,
                std::vector<int32_t>& positions, int32_t& rope_delta);
void rope_index(std::span<const int32_t> ids, std::span<const GridThw> grids, const Config& cfg,
                std::vector<int32_t>& positions, int32_t& rope_delta);

// preprocessor_config.json of the checkpoint in `dir` (the class defaults when absent), checked
// against cfg.vision's patch, merge and temporal sizes (FormatError naming both).
ImageProcessorConfig read_processor_config(const std::string& dir, const Config& cfg);

// The grid of an image of the given source size: smart_resize, then patches.
GridThw image_grid(int64_t height, int64_t width, const ImageProcessorConfig& pp);

// The Processor of a loaded checkpoint: images, and videos sampled with `video`.
// `tokens_per_second` > 0 (Qwen2.5-VL): a video's temporal positions follow time (MediaGrid).
std::unique_ptr<Processor> make_processor(const Config& cfg, const ImageProcessorConfig& pp,
                                          const Hash128& config_key, int32_t position_rows,
                                          const VideoSamplingConfig& video = {},
                                          int64_t tokens_per_second = 0);

}  // namespace mmrt::models::qwen2_vl
