// The CPU backend's layout kernels: plain copies split over the pool when large.
#include <algorithm>
#include <cstring>

#include "core/convert.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/parallel.h"

namespace mmrt::kernels::cpu {

void copy2d(const CpuBackend& be, float* dst, int64_t dst_stride, const float* src,
            int64_t src_stride, int64_t rows, int64_t cols) {
  if (dst_stride == cols && src_stride == cols) {  // one block
    for_rows(be.pool(), rows, cols, [&](int64_t b, int64_t e) {
      std::memcpy(dst + b * cols, src + b * cols, static_cast<size_t>((e - b) * cols) * 4);
    });
    return;
  }
  for_rows(be.pool(), rows, cols, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      std::memcpy(dst + r * dst_stride, src + r * src_stride, static_cast<size_t>(cols) * 4);
  });
}

void im2col_1d(const CpuBackend& be, const float* x, const Im2col1d& s, float* cols) {
  const int64_t width = s.channels * s.k;
  for_rows(be.pool(), s.t_out, width, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* dst = cols + t * width;  // [channels * k]
      for (int64_t j = 0; j < s.k; ++j) {
        const int64_t src_t = t * s.stride + j - s.pad;
        const bool inside = src_t >= 0 && src_t < s.t_in;
        const float* src = inside ? x + src_t * s.t_stride : nullptr;
        for (int64_t c = 0; c < s.channels; ++c)
          dst[c * s.k + j] = inside ? src[c * s.c_stride] : 0.0f;
      }
    }
  });
}

void patchify_2d(const CpuBackend& be, const float* images, int64_t n, int64_t channels,
                 int64_t size, int64_t patch, float* rows) {
  const int64_t side = size / patch, width = channels * patch * patch;
  for_rows(be.pool(), n * side, side * width, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t img = r / side, py = r % side;
      const float* src = images + img * channels * size * size;
      for (int64_t px = 0; px < side; ++px) {
        float* dst = rows + ((img * side + py) * side + px) * width;
        for (int64_t c = 0; c < channels; ++c)
          for (int64_t y = 0; y < patch; ++y)
            std::memcpy(dst + (c * patch + y) * patch,
                        src + (c * size + py * patch + y) * size + px * patch,
                        static_cast<size_t>(patch) * sizeof(float));
      }
    }
  });
}

void to_f16(const CpuBackend& be, const float* x, uint16_t* y, int64_t n) {
  for_flat(be.pool(), n,
           [&](int64_t b, int64_t e) { f32_to_f16(x + b, y + b, static_cast<size_t>(e - b)); });
}

void from_f16(const CpuBackend& be, const uint16_t* x, float* y, int64_t n) {
  for_flat(be.pool(), n,
           [&](int64_t b, int64_t e) { f16_to_f32(x + b, y + b, static_cast<size_t>(e - b)); });
}

}  // namespace mmrt::kernels::cpu
