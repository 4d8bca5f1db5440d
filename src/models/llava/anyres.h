// LLaVA-NeXT's "anyres" geometry, from the image size alone (HF image_processing_utils
// select_best_resolution / get_patch_output_size, modeling_llava_next unpad_image and
// processing_llava_next _get_number_of_features): which grid of crops an image becomes, and how
// many tokens it expands to. Shared by the image processor (pixels), the processor (token
// counts, before any decoding) and the runner (packing the crops' features), so all three agree.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mmrt::models::llava {

struct Resolution {
  int64_t height = 0, width = 0;
  bool operator==(const Resolution&) const = default;
};

// The pinpoint (height, width) that keeps the most of the image's pixels after an
// aspect-preserving downscale, the least wasted area on a tie (first in order on a full tie).
// InvalidArgument for an empty list or a non-positive size.
Resolution select_best_resolution(Resolution original, std::span<const Resolution> pinpoints);

// The aspect-preserving size of `original` that fits in `target` (ceil on the scaled side).
Resolution patch_output_size(Resolution original, Resolution target);

// Python's int(round(x, 7)) for the non-negative values unpad_image computes.
int64_t round7_to_int(double x);

// Where one image's tokens come from.
struct ImageLayout {
  Resolution original;                   // the image's (height, width)
  Resolution best;                       // anyres: the chosen pinpoint
  int64_t tile_rows = 0, tile_cols = 0;  // anyres: crops of the padded image (0: none, LLaVA-1.5)
  int64_t n_crops = 1;                   // 1 (the base image) + tile_rows * tile_cols
  int64_t side = 0;                      // patches per crop side (image_size / patch_size)
  // anyres: the grid's feature map is (tile_rows * side) x (tile_cols * side) patches; after
  // unpadding, rows [top, top + rows) and columns [left, left + cols) remain.
  int64_t top = 0, left = 0, rows = 0, cols = 0;
  int64_t base_tokens = 0;  // tokens of the base crop (side², +1 with the class token)
  bool newline = false;     // a newline token ends every row of the grid (image_newline)
  int64_t n_tokens = 0;     // base_tokens + rows * (cols + newline)
};

struct LayoutParams {
  std::vector<Resolution> pinpoints;  // empty: LLaVA-1.5 (one crop, no grid)
  int64_t crop = 336;                 // crop side in pixels (the vision tower's image_size)
  int64_t patch = 14;                 // the vision tower's patch size
  bool keep_cls = false;              // vision_feature_select_strategy "full"
  bool newline = true;                // the checkpoint has image_newline
};
// InvalidArgument for a non-positive size or pinpoints that are not multiples of `crop`.
ImageLayout image_layout(Resolution original, const LayoutParams& p);

}  // namespace mmrt::models::llava
