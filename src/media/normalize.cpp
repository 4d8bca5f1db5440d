#include "media/normalize.h"

namespace mmrt::media {

NormalizeLut normalize_lut(const std::array<double, 3>& mean, const std::array<double, 3>& std,
                           double rescale_factor, bool do_rescale, bool do_normalize) {
  NormalizeLut t;
  for (int c = 0; c < 3; ++c) {
    const float m = static_cast<float>(mean[c]);
    const float s = static_cast<float>(std[c]);
    for (int v = 0; v < 256; ++v) {
      // An uint8 image that is not rescaled is converted to float32 before normalising.
      const double r = do_rescale ? static_cast<double>(v) * rescale_factor : v;
      float x = static_cast<float>(r);
      if (do_normalize) x = (x - m) / s;
      t.v[c][v] = x;
    }
  }
  return t;
}

}  // namespace mmrt::media
