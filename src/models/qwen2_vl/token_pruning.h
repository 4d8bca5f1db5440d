// The approximate temporal tier for Qwen2-VL video (off by default; MediaOptions): which merged
// tokens of pixel_values_videos to keep. A token covers a merge x merge block of patches over
// one 2-frame slice (Qwen2-VL: 28 x 28 pixels x 2 frames x 3 channels). Slice 0 is kept whole;
// a token of a later slice is dropped when the mean absolute difference of its pixels, in 8-bit
// levels, from the last KEPT token at the same (h, w) is below the threshold. Comparing with the
// last kept token rather than the previous slice bounds the drift: a region that changes slowly
// is kept again once it has moved the threshold away from what the model last saw there.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/qwen2_vl/config.h"
#include "models/qwen2_vl/image_processor.h"

namespace mmrt::models::qwen2_vl {

// Kept token indices (strictly increasing) among the grid's t * (h/m) * (w/m) tokens, in
// pixel_values_videos order (slice-major). `pixel_values` is [t*h*w, C*T*p*p] f32 as patchify
// lays it out (rescaled and normalised as `pp` says: the levels are recovered from it exactly).
// threshold 0 keeps every token.
std::vector<int32_t> prune_video_tokens(const Tensor& pixel_values, const GridThw& grid,
                                        const ImageProcessorConfig& pp, double threshold);

// (t, h, w) of token q of a grid of merged tokens (gh x gw per slice).
struct TokenPos {
  int64_t t, h, w;
};
inline TokenPos token_pos(int64_t q, int64_t gh, int64_t gw) {
  return {q / (gh * gw), (q / gw) % gh, q % gw};
}

}  // namespace mmrt::models::qwen2_vl
