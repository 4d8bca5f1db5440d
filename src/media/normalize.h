// What Hugging Face's image processors make of one byte: rescaled as numpy does it (v * factor in
// float64, then float32) and normalised in float32 ((x - mean) / std, mean and std as float32),
// either step optional. The value depends only on (channel, byte), so their per-pixel loops
// become lookups in this 3 x 256 table (Qwen2-VL, LLaVA, Fuyu).
#pragma once

#include <array>

namespace mmrt::media {

struct NormalizeLut {
  float v[3][256];  // [channel][byte]
};

NormalizeLut normalize_lut(const std::array<double, 3>& mean, const std::array<double, 3>& std,
                           double rescale_factor, bool do_rescale, bool do_normalize);

}  // namespace mmrt::media
