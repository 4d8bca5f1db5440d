// Dispatchers of the layout ops, with the argument checks every device shares.
#include "kernels/layout.h"

#include <string>

#include "core/error.h"

namespace mmrt::kernels {

void copy2d(const Backend& be, float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
            int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0 || dst_stride < cols || src_stride < cols)
    throw InvalidArgument("copy2d: bad shape: " + std::to_string(rows) + " rows of " +
                          std::to_string(cols) + " with strides " + std::to_string(dst_stride) +
                          " / " + std::to_string(src_stride));
  if (rows == 0 || cols == 0) return;
  if (!dst || !src) throw InvalidArgument("copy2d: null pointer");
  detail::entry(be, be.ops().layout, &LayoutOps::copy2d, Op::kCopy2d)(be, dst, dst_stride, src,
                                                                      src_stride, rows, cols);
}

void im2col_1d(const Backend& be, const float* x, const Im2col1d& s, float* cols) {
  if (s.channels < 1 || s.t_in < 0 || s.k < 1 || s.stride < 1 || s.pad < 0 || s.t_out < 0 ||
      s.c_stride < 0 || s.t_stride < 0)
    throw InvalidArgument("im2col_1d: bad shape (channels " + std::to_string(s.channels) +
                          ", t_in " + std::to_string(s.t_in) + ", k " + std::to_string(s.k) +
                          ", stride " + std::to_string(s.stride) + ", t_out " +
                          std::to_string(s.t_out) + ")");
  if (s.t_out == 0) return;
  if (!cols || (s.t_in > 0 && !x)) throw InvalidArgument("im2col_1d: null pointer");
  detail::entry(be, be.ops().layout, &LayoutOps::im2col_1d, Op::kIm2col1d)(be, x, s, cols);
}

void patchify_2d(const Backend& be, const float* images, int64_t n, int64_t channels, int64_t size,
                 int64_t patch, float* rows) {
  if (n < 0 || channels < 1 || patch < 1 || size < patch || size % patch != 0)
    throw InvalidArgument("patchify_2d: " + std::to_string(size) + "-pixel images do not split " +
                          "into patches of " + std::to_string(patch));
  if (n == 0) return;
  if (!images || !rows) throw InvalidArgument("patchify_2d: null pointer");
  detail::entry(be, be.ops().layout, &LayoutOps::patchify_2d, Op::kPatchify2d)(
      be, images, n, channels, size, patch, rows);
}

void to_f16(const Backend& be, const float* x, uint16_t* y, int64_t n) {
  if (n < 0) throw InvalidArgument("to_f16: negative count " + std::to_string(n));
  if (n == 0) return;
  if (!x || !y) throw InvalidArgument("to_f16: null pointer");
  detail::entry(be, be.ops().layout, &LayoutOps::to_f16, Op::kToF16)(be, x, y, n);
}

void from_f16(const Backend& be, const uint16_t* x, float* y, int64_t n) {
  if (n < 0) throw InvalidArgument("from_f16: negative count " + std::to_string(n));
  if (n == 0) return;
  if (!x || !y) throw InvalidArgument("from_f16: null pointer");
  detail::entry(be, be.ops().layout, &LayoutOps::from_f16, Op::kFromF16)(be, x, y, n);
}

}  // namespace mmrt::kernels
