// Data-movement ops (an op family: LayoutOps): the copies and rearrangements model code needs
// between its compute ops — strided row copies (heads padded for a kernel, encoder rows into a
// sequence, embedding rows), the im2col of a 1-D convolution and the patches of a strided 2-D
// convolution, and f16 storage of activations. Model code never loops over activation memory itself
// (scripts/check_source_rules.py). Pointers are memory of the backend's device.
#pragma once

#include <cstdint>

#include "kernels/backend.h"

namespace mmrt::kernels {

// dst[r * dst_stride + c] = src[r * src_stride + c] for r < rows, c < cols (floats). The regions
// must not overlap.
void copy2d(const Backend& be, float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
            int64_t rows, int64_t cols);

// The columns of a 1-D convolution (kernel k, stride, zero padding pad on both sides):
//   cols[t, c * k + j] = x(c, t * stride + j - pad)   for t < t_out, c < channels, j < k,
// where x(c, s) = x[c * c_stride + s * t_stride] for 0 <= s < t_in, else 0.
// cols: [t_out, channels * k]. (Channel-major input: c_stride = t_in, t_stride = 1; time-major:
// c_stride = 1, t_stride = channels.)
struct Im2col1d {
  int64_t channels = 0, t_in = 0, c_stride = 0, t_stride = 0;
  int64_t k = 0, stride = 1, pad = 0, t_out = 0;
};
void im2col_1d(const Backend& be, const float* x, const Im2col1d& shape, float* cols);

// Non-overlapping square patches of images (a Conv2d with kernel = stride = patch):
// images [n, channels, size, size] -> rows [n * side * side, channels * patch * patch] with
// side = size / patch, rows in (image, patch row, patch column) order and each row in the
// conv weight's (channel, y, x) order.
void patchify_2d(const Backend& be, const float* images, int64_t n, int64_t channels, int64_t size,
                 int64_t patch, float* rows);

// Half-precision storage of activations (the engine keeps encoder outputs in f16):
// y[i] = x[i] rounded to the nearest f16 (ties to even; overflow to inf, NaN kept), and back
// exactly. x and y must not overlap.
void to_f16(const Backend& be, const float* x, uint16_t* y, int64_t n);
void from_f16(const Backend& be, const uint16_t* x, float* y, int64_t n);

// A device's layout kernels (arguments as above).
struct LayoutOps {
  void (*copy2d)(const Backend&, float* dst, int64_t dst_stride, const float* src,
                 int64_t src_stride, int64_t rows, int64_t cols);
  void (*im2col_1d)(const Backend&, const float* x, const Im2col1d& shape, float* cols);
  void (*patchify_2d)(const Backend&, const float* images, int64_t n, int64_t channels,
                      int64_t size, int64_t patch, float* rows);
  void (*to_f16)(const Backend&, const float* x, uint16_t* y, int64_t n);
  void (*from_f16)(const Backend&, const uint16_t* x, float* y, int64_t n);
};

}  // namespace mmrt::kernels
