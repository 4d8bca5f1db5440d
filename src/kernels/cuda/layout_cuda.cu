// The CUDA backend's layout kernels (kernels/layout.h; the dispatcher checked the arguments):
// strided row copies through the copy engine, the 1-D im2col and 2-D patches as one thread per
// output element, f16 storage with the hardware's round-to-nearest-even conversion.
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/layout.h"

namespace mmrt::kernels::cuda {

namespace {

__global__ void im2col_1d_kernel(const float* x, Im2col1d s, float* cols) {
  const int64_t width = s.channels * s.k;
  MMRT_CUDA_FOR(i, s.t_out * width) {
    const int64_t t = i / width, c = (i % width) / s.k, j = i % s.k;
    const int64_t src_t = t * s.stride + j - s.pad;
    cols[i] = src_t >= 0 && src_t < s.t_in ? x[c * s.c_stride + src_t * s.t_stride] : 0.0f;
  }
}

__global__ void patchify_2d_kernel(const float* images, int64_t n, int64_t channels, int64_t size,
                                   int64_t patch, float* rows) {
  const int64_t side = size / patch, width = channels * patch * patch;
  MMRT_CUDA_FOR(i, n * side * side * width) {
    const int64_t row = i / width, col = i % width;
    const int64_t img = row / (side * side), py = (row / side) % side, px = row % side;
    const int64_t c = col / (patch * patch), y = (col / patch) % patch, xx = col % patch;
    rows[i] = images[((img * channels + c) * size + py * patch + y) * size + px * patch + xx];
  }
}

__global__ void to_f16_kernel(const float* x, uint16_t* y, int64_t n) {
  MMRT_CUDA_FOR(i, n) y[i] = __half_as_ushort(__float2half_rn(x[i]));
}

__global__ void from_f16_kernel(const uint16_t* x, float* y, int64_t n) {
  MMRT_CUDA_FOR(i, n) y[i] = __half2float(__ushort_as_half(x[i]));
}

void copy2d(const Backend& be, float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
            int64_t rows, int64_t cols) {
  if (!sign_call(be, dst, dst_stride, src, src_stride, rows, cols)) return;
  check(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_stride) * 4, src,
                          static_cast<size_t>(src_stride) * 4, static_cast<size_t>(cols) * 4,
                          static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream_of(be)),
        "copy2d");
}

void im2col_1d(const Backend& be, const float* x, const Im2col1d& s, float* cols) {
  launch(be, "im2col_1d", im2col_1d_kernel, flat_blocks(s.t_out * s.channels * s.k), kFlatThreads,
         0, x, s, cols);
}

void patchify_2d(const Backend& be, const float* images, int64_t n, int64_t channels, int64_t size,
                 int64_t patch, float* rows) {
  launch(be, "patchify_2d", patchify_2d_kernel, flat_blocks(n * channels * size * size),
         kFlatThreads, 0, images, n, channels, size, patch, rows);
}

void to_f16(const Backend& be, const float* x, uint16_t* y, int64_t n) {
  launch(be, "to_f16", to_f16_kernel, flat_blocks(n), kFlatThreads, 0, x, y, n);
}

void from_f16(const Backend& be, const uint16_t* x, float* y, int64_t n) {
  launch(be, "from_f16", from_f16_kernel, flat_blocks(n), kFlatThreads, 0, x, y, n);
}

}  // namespace

const LayoutOps kLayout{
    .copy2d = &copy2d,
    .im2col_1d = &im2col_1d,
    .patchify_2d = &patchify_2d,
    .to_f16 = &to_f16,
    .from_f16 = &from_f16,
};

}  // namespace mmrt::kernels::cuda
