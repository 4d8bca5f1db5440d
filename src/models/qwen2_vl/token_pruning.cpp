#include "models/qwen2_vl/token_pruning.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace mmrt::models::qwen2_vl {

std::vector<int32_t> prune_video_tokens(const Tensor& pixel_values, const GridThw& g,
                                        const ImageProcessorConfig& pp, double threshold) {
  const int64_t m = pp.merge_size, T = pp.temporal_patch_size, p = pp.patch_size;
  const int64_t D = 3 * T * p * p, per_token = m * m;
  if (g[0] < 1 || g[1] % m != 0 || g[2] % m != 0)
    throw InvalidArgument("prune_video_tokens: grid (" + std::to_string(g[0]) + ", " +
                          std::to_string(g[1]) + ", " + std::to_string(g[2]) +
                          ") is not a grid of whole merged tokens");
  if (pixel_values.dtype() != DType::kF32 || pixel_values.rank() != 2 || pixel_values.dim(1) != D ||
      pixel_values.dim(0) != g[0] * g[1] * g[2])
    throw InvalidArgument("prune_video_tokens: pixel_values " + pixel_values.describe() +
                          " do not match the grid");
  const int64_t tokens = g[1] * g[2] / per_token, total = g[0] * tokens;
  if (total > INT32_MAX) throw InvalidArgument("prune_video_tokens: too many tokens");
  std::vector<int32_t> kept;
  kept.reserve(static_cast<size_t>(total));
  for (int64_t q = 0; q < tokens; ++q) kept.push_back(static_cast<int32_t>(q));
  if (g[0] == 1 || !(threshold > 0)) {
    for (int64_t q = tokens; q < total; ++q) kept.push_back(static_cast<int32_t>(q));
    return kept;
  }
  // A value is lut[c][level]; the difference of two values times std / rescale is the level
  // difference up to float rounding (< 1e-4 of a level): rounded, it is exact.
  double scale[3];
  for (int c = 0; c < 3; ++c)
    scale[c] =
        (pp.do_normalize ? pp.image_std[c] : 1.0) / (pp.do_rescale ? pp.rescale_factor : 1.0);
  const int64_t per_channel = T * p * p, values = per_token * D;
  // The sum of level differences is an integer: drop when sum < threshold * values.
  const double limit = threshold * static_cast<double>(values);
  const float* px = pixel_values.data<float>();
  std::vector<int64_t> ref(static_cast<size_t>(tokens));  // last kept slice per position
  for (int64_t s = 1; s < g[0]; ++s)
    for (int64_t q = 0; q < tokens; ++q) {
      const float* a = px + (s * tokens + q) * per_token * D;
      const float* b = px + (ref[static_cast<size_t>(q)] * tokens + q) * per_token * D;
      int64_t sum = 0;
      for (int64_t r = 0; r < per_token; ++r)
        for (int c = 0; c < 3; ++c) {
          const float* x = a + r * D + c * per_channel;
          const float* y = b + r * D + c * per_channel;
          const float sc = static_cast<float>(scale[c]);
          // Truncating |d| + 0.5 rounds it (never half-way: it is an integer within 1e-4), and
          // unlike nearbyint it vectorises on every x86-64.
          int32_t acc = 0;
          for (int64_t k = 0; k < per_channel; ++k)
            acc += static_cast<int32_t>(std::fabs(x[k] - y[k]) * sc + 0.5f);
          sum += acc;
        }
      if (static_cast<double>(sum) < limit) continue;
      kept.push_back(static_cast<int32_t>(s * tokens + q));
      ref[static_cast<size_t>(q)] = s;
    }
  return kept;
}

}  // namespace mmrt::models::qwen2_vl
