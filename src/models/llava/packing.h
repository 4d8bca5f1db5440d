// LLaVA-NeXT's pack_image_features (HF modeling_llava_next.py): the base crop's features first
// (no newline), then the grid crops' features as one spatial map, unpadded to the image's aspect
// ratio, with the image_newline row appended after every row, flattened row-major. LLaVA-1.5
// (one crop) passes the crop's features through.
#pragma once

#include "core/tensor.h"
#include "kernels/backend.h"
#include "models/llava/anyres.h"

namespace mmrt::models::llava {

// crops: [n_crops * tokens_per_crop, hidden] f32 in crop order; newline: [hidden] f32 or null
// (layout.newline false). Returns [layout.n_tokens, hidden] f32. InvalidArgument when the rows
// do not match the layout.
Tensor pack_image_features(const kernels::Backend& be, const Tensor& crops,
                           const ImageLayout& layout, const float* newline);

}  // namespace mmrt::models::llava
