// The CUDA backend's element-wise kernels (kernels/ops.h; the dispatcher checked the arguments).
// Row ops (the norms, softmax, embedding rows) run one block of kRowThreads per row, reducing in
// f32 with warp shuffles; the flat ones a grid-stride loop. f32 activations; weights and biases
// read in their stored type (f32, bf16, f16). The sums run in another order than the CPU's, so
// results agree with it to f32 rounding, not bit for bit.
#include <cuda_fp16.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_math.cuh"
#include "kernels/ops.h"

namespace mmrt::kernels::cuda {

namespace {

// A weight or bias vector on the device, read as f32 whatever its stored type.
struct Param {
  const void* p = nullptr;
  int kind = 0;  // 0 f32, 1 bf16, 2 f16
};

void sign_struct(const Backend& be, const Param& w) {
  sign_args(be, w.p, w.kind);
}

Param param(const Tensor& t) {
  return {t.raw(), t.dtype() == DType::kF32 ? 0 : t.dtype() == DType::kBF16 ? 1 : 2};
}

__device__ __forceinline__ float load(const Param& w, int64_t i) {
  if (w.kind == 0) return static_cast<const float*>(w.p)[i];
  const uint16_t v = static_cast<const uint16_t*>(w.p)[i];
  return w.kind == 1 ? bf16_bits_to_f32(v) : __half2float(__ushort_as_half(v));
}

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  // NaN wins, as torch's max does.
  __device__ float operator()(float a, float b) const { return (a != a || a > b) ? a : b; }
};

// The block's reduction of one value per thread, returned to every thread.
template <class Op>
__device__ float block_reduce(float v, Op op, float identity) {
  __shared__ float warp_part[32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  __syncthreads();  // a previous reduction's readers are done with warp_part and total
  if (lane == 0) warp_part[w] = v;
  __syncthreads();
  if (w == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? warp_part[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

__global__ void rms_norm_kernel(const float* x, Param w, float eps, float* y, int64_t d) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * d;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * d;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_reduce(ss, SumOp{}, 0.f);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = load(w, i) * (xr[i] * r);
}

// One LayerNorm row: `x` and `y` may be the same row (every element is read and written by
// the same thread, after both reductions).
__device__ void layer_norm_row(const float* x, Param w, Param b, float eps, float* y, int64_t d) {
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += x[i];
  const float mean = block_reduce(s, SumOp{}, 0.f) / static_cast<float>(d);
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += (x[i] - mean) * (x[i] - mean);
  const float var = block_reduce(ss, SumOp{}, 0.f) / static_cast<float>(d);
  const float rstd = 1.0f / sqrtf(var + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    y[i] = (x[i] - mean) * rstd * load(w, i) + load(b, i);
}

__global__ void layer_norm_kernel(const float* x, Param w, Param b, float eps, float* y,
                                  int64_t d) {
  const int64_t r = blockIdx.x;
  layer_norm_row(x + r * d, w, b, eps, y + r * d, d);
}

__global__ void layer_norm_heads_kernel(float* x, int64_t n_heads, int64_t stride, Param w, Param b,
                                        float eps, int64_t d) {
  const int64_t r = blockIdx.x;
  float* head = x + (r / n_heads) * stride + (r % n_heads) * d;
  layer_norm_row(head, w, b, eps, head, d);
}

__global__ void softmax_kernel(const float* x, float* y, int64_t d) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * d;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * d;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) m = MaxOp{}(m, xr[i]);
  m = block_reduce(m, MaxOp{}, -INFINITY);
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float e = expf(xr[i] - m);
    yr[i] = e;
    s += e;
  }
  const float inv = 1.0f / block_reduce(s, SumOp{}, 0.f);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] *= inv;
}

__global__ void embedding_kernel(Param table, const int32_t* ids, int64_t d, float* out) {
  const int64_t row = ids[blockIdx.x];
  float* o = out + static_cast<int64_t>(blockIdx.x) * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) o[i] = load(table, row * d + i);
}

// Flat kernels over n elements: y[i] = f(x[i]), and acc[i] += x[i].
template <class F>
__global__ void flat_kernel(const float* x, float* y, int64_t n, F f) {
  MMRT_CUDA_FOR(i, n) y[i] = f(x[i]);
}

__global__ void add_kernel(float* acc, const float* x, int64_t n) {
  MMRT_CUDA_FOR(i, n) acc[i] += x[i];
}

struct GeluErfF {
  __device__ float operator()(float x) const { return gelu_exact(x); }
};
struct QuickGeluF {
  __device__ float operator()(float x) const { return x_sigmoid(x, 1.702f); }
};
struct ReluSquaredF {
  __device__ float operator()(float x) const {
    const float r = x > 0.f ? x : 0.f;
    return r * r;
  }
};

template <class F>
void run_flat(const Backend& be, const float* x, float* y, int64_t n, F f, const char* what) {
  launch(be, what, flat_kernel<F>, flat_blocks(n), kFlatThreads, 0, x, y, n, f);
}

__global__ void silu_mul_kernel(const float* gate, const float* up, float* out, int64_t n,
                                int64_t inter, int64_t in_stride) {
  MMRT_CUDA_FOR(i, n * inter) {
    const int64_t r = i / inter, c = i % inter;
    const float g = gate[r * in_stride + c];
    out[i] = x_sigmoid(g, 1.0f) * up[r * in_stride + c];
  }
}

void rms_norm(const Backend& be, const float* x, const Tensor& weight, float eps, float* y,
              int64_t n, int64_t d) {
  launch(be, "rms_norm", rms_norm_kernel, row_blocks("rms_norm", n), kRowThreads, 0, x,
         param(weight), eps, y, d);
}

void layer_norm(const Backend& be, const float* x, const Tensor& weight, const Tensor& bias,
                float eps, float* y, int64_t n, int64_t d) {
  launch(be, "layer_norm", layer_norm_kernel, row_blocks("layer_norm", n), kRowThreads, 0, x,
         param(weight), param(bias), eps, y, d);
}

void layer_norm_heads(const Backend& be, float* x, int64_t n, int64_t stride, int64_t n_heads,
                      int64_t d, const Tensor& weight, const Tensor& bias, float eps) {
  launch(be, "layer_norm_heads", layer_norm_heads_kernel,
         row_blocks("layer_norm_heads", n * n_heads), kRowThreads, 0, x, n_heads, stride,
         param(weight), param(bias), eps, d);
}

void add(const Backend& be, float* acc, const float* x, int64_t n) {
  launch(be, "add", add_kernel, flat_blocks(n), kFlatThreads, 0, acc, x, n);
}

void silu_mul(const Backend& be, const float* gate, const float* up, float* out, int64_t n,
              int64_t inter, int64_t in_stride) {
  // Threads run in any order: an output row may overwrite inputs only where each element is
  // its own input's place (contiguous rows).
  const auto* o = reinterpret_cast<const char*>(out);
  const auto* g = reinterpret_cast<const char*>(gate);
  const auto* u = reinterpret_cast<const char*>(up);
  const size_t out_bytes = static_cast<size_t>(n * inter) * 4;
  const size_t in_bytes = static_cast<size_t>((n - 1) * in_stride + inter) * 4;
  const bool overlaps =
      (o < g + in_bytes && g < o + out_bytes) || (o < u + in_bytes && u < o + out_bytes);
  if (overlaps && !(in_stride == inter && (out == gate || out == up)))
    throw InvalidArgument(
        "silu_mul: on cuda the output may alias an input only element for element (contiguous "
        "rows)");
  launch(be, "silu_mul", silu_mul_kernel, flat_blocks(n * inter), kFlatThreads, 0, gate, up, out, n,
         inter, in_stride);
}

void gelu_erf(const Backend& be, const float* x, float* y, int64_t n) {
  run_flat(be, x, y, n, GeluErfF{}, "gelu_erf");
}

void quick_gelu(const Backend& be, const float* x, float* y, int64_t n) {
  run_flat(be, x, y, n, QuickGeluF{}, "quick_gelu");
}

void relu_squared(const Backend& be, const float* x, float* y, int64_t n) {
  run_flat(be, x, y, n, ReluSquaredF{}, "relu_squared");
}

void softmax(const Backend& be, const float* x, float* y, int64_t n, int64_t d) {
  launch(be, "softmax", softmax_kernel, row_blocks("softmax", n), kRowThreads, 0, x, y, d);
}

void embedding(const Backend& be, const Tensor& table, const int32_t* ids, int64_t n, float* out) {
  const auto* dev_ids = static_cast<const int32_t*>(
      upload_scratch(be, 0, ids, static_cast<size_t>(n) * sizeof(int32_t)));
  launch(be, "embedding", embedding_kernel, row_blocks("embedding", n), kRowThreads, 0,
         param(table), dev_ids, table.dim(1), out);
}

}  // namespace

const ElementwiseOps kElementwise{
    .rms_norm = &rms_norm,
    .layer_norm = &layer_norm,
    .layer_norm_heads = &layer_norm_heads,
    .add = &add,
    .silu_mul = &silu_mul,
    .gelu_erf = &gelu_erf,
    .quick_gelu = &quick_gelu,
    .relu_squared = &relu_squared,
    .softmax = &softmax,
    .embedding = &embedding,
};

}  // namespace mmrt::kernels::cuda
