// The CUDA backend's linear layers (kernels/linear.h).
//   Up to gemv_max_rows rows (decode): a matrix-vector kernel of ours that streams each weight
//     row once for every x row (16-byte words: 4 f32, 8 bf16 or 16 int8 weights a lane, four in
//     flight), x staged in shared memory once per block, sums in f32, and the int8 scale, bias,
//     activation and residual add applied before the one write: one launch, int8 weights half
//     the bytes of bf16 (no widening). Rows longer than 12,288 floats take the GEMM.
//   More rows: cuBLAS's GEMM with f32 accumulation, then one epilogue kernel (the per-channel
//     int8 scale, the bias, the activation, the residual add).
//   f32 weights:  x and W in f32 (CUBLAS_COMPUTE_32F: no TF32), exact as the CPU's f32 path.
//   bf16 weights: x rounded to bf16 once, bf16 x bf16 with f32 sums (x_rounded_to_bf16).
//   int8 weights: bf16(x) times the integers (exact in f32), the scale after the sum; the GEMM
//                 widens W to bf16 per call (exact: |q| <= 127). Int8Gemm::kQ8Row and
//                 Int8Activations change nothing here yet.
//   fp8 weights:  E4M3 (core/convert.h) as int8: bf16(x) times the values (exact in f32 and in
//                 bf16, so the GEMM's widening is exact too), the scale after the sum.
// Still to come: the int8 GEMM without widening and the fused cuBLASLt epilogues.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/cuda_pack.h"
#include "kernels/linear.h"

namespace mmrt::kernels::cuda {

namespace {

// Scratch slots of the linear op (cuda_internal.h: 0-2 are the step metadata's).
constexpr int kSlotX = 3, kSlotW = kSharedSlot, kSlotTile = 5;

void check_cublas(const CublasApi& api, cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  if (s == CUBLAS_STATUS_ALLOC_FAILED)
    throw ResourceExhausted(std::string(what) + ": " + api.status_string(s));
  throw Unavailable(std::string(what) + ": " + api.status_string(s));
}

__global__ void to_bf16_kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  MMRT_CUDA_FOR(i, n) y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void i8_to_bf16_kernel(const int8_t* q, __nv_bfloat16* y, int64_t n) {
  MMRT_CUDA_FOR(i, n) y[i] = __float2bfloat16_rn(static_cast<float>(q[i]));
}

// FP8 E4M3 (core/convert.h): the byte's exponent and mantissa placed where an f32's are, so
// the f32 is the value times 2^-120 (e4m3 subnormals become f32 subnormals), then scaled back
// exactly. No conversion instructions.
__device__ __forceinline__ float e4m3_value(uint32_t top) {  // the byte in bits 31..24
  return __uint_as_float(((top >> 4) & 0x07f00000u) | (top & 0x80000000u)) * 0x1p120f;
}
__global__ void e4m3_to_bf16_kernel(const uint8_t* q, __nv_bfloat16* y, int64_t n) {
  MMRT_CUDA_FOR(i, n) y[i] = __float2bfloat16_rn(e4m3_value(static_cast<uint32_t>(q[i]) << 24));
}

// y[r, c] (+)= act(t[r, c] * scale[c] + bias[c]); t may be y (not with accumulate).
__global__ void epilogue_kernel(const float* t, int64_t n, int64_t out, const float* scale,
                                const float* bias, int act, bool accumulate, float* y) {
  MMRT_CUDA_FOR(i, n * out) {
    const int64_t c = i % out;
    float v = t[i];
    if (scale) v = v * scale[c];
    if (bias) v = v + bias[c];
    if (act == 1) v = x_sigmoid(v, 1.702f);  // quick_gelu
    if (act == 2) v = gelu_exact(v);         // exact GELU
    y[i] = accumulate ? y[i] + v : v;
  }
}

// ---- the matrix-vector kernel ----

constexpr int kGemvWarps = 8;  // warps per block, one output channel each at a time

// A weight type's 16-byte word: kPer weights, unpacked to f32 with integer operations only (no
// conversion instructions: they issue at a quarter of the rate the weights stream at).
template <class T>
struct Weights;
template <>
struct Weights<float> {
  static constexpr int kPer = 4;
  __device__ static void unpack(uint4 v, float* w) {
    w[0] = __uint_as_float(v.x), w[1] = __uint_as_float(v.y), w[2] = __uint_as_float(v.z),
    w[3] = __uint_as_float(v.w);
  }
  __device__ static float one(const float* p) { return __ldg(p); }
};
template <>
struct Weights<uint16_t> {  // bf16 bits; element 2i is the low half of word i (little-endian)
  static constexpr int kPer = 8;
  __device__ static void unpack(uint4 v, float* w) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[2 * i] = __uint_as_float(u[i] << 16);
      w[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
  }
  __device__ static float one(const uint16_t* p) {
    return bf16_bits_to_f32(__ldg(p));
  }
};
template <>
struct Weights<int8_t> {
  static constexpr int kPer = 16;
  // q in [-128, 127]: the float 2^23 + (q + 128) built from its bits, less 2^23 + 128 (exact).
  __device__ static void unpack(uint4 v, float* w) {
    const uint32_t u[4] = {v.x ^ 0x80808080u, v.y ^ 0x80808080u, v.z ^ 0x80808080u,
                           v.w ^ 0x80808080u};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int b = 0; b < 4; ++b)
        w[4 * i + b] = __uint_as_float(__byte_perm(u[i], 0x4B000000u, 0x7540u + b)) - 8388736.0f;
  }
  __device__ static float one(const int8_t* p) {
    return static_cast<float>(__ldg(p));
  }
};

template <>
struct Weights<uint8_t> {  // FP8 E4M3 bytes
  static constexpr int kPer = 16;
  __device__ static void unpack(uint4 v, float* w) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int b = 0; b < 4; ++b)
        w[4 * i + b] = e4m3_value(__byte_perm(u[i], 0u, 0x0444u | (b << 12)));
  }
  __device__ static float one(const uint8_t* p) {
    return e4m3_value(static_cast<uint32_t>(__ldg(p)) << 24);
  }
};

template <bool RoundX>
__device__ __forceinline__ float rx(float v) {
  return RoundX ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}

constexpr int kGemvUnroll = 4;                   // 16-byte weight words a lane has in flight
constexpr int64_t kGemvSharedX = 48 * 1024 / 4;  // x rows staged in shared memory up to this

// y[r, o] (+)= act(scale[o] * sum_i x[r, i] w[o, i] + bias[o]) for r < n <= gemv_max_rows: each
// warp takes output channels in turn; each lane sums its slice of the channel's weights against
// every row of x, then the warp reduces. x (n * k <= kGemvSharedX floats) is staged in shared
// memory once per block, rounded as RoundX says. Vec: 16-byte weight words, kGemvUnroll of them
// loaded before any is used, and x read as float4 (k a multiple of kPer, w 16-byte aligned);
// else one element a lane at a time.
template <class T, bool Vec, bool RoundX>
__global__ void __launch_bounds__(32 * kGemvWarps)
    gemv_kernel(const float* x, int n, int64_t k, const T* w, int64_t out, const float* scale,
                const float* bias, int act, bool accumulate, float* y) {
  constexpr int R = 8;  // gemv_max_rows
  extern __shared__ float4 xs4[];
  float* xs = reinterpret_cast<float*>(xs4);
  for (int64_t i = threadIdx.x; i < n * k; i += blockDim.x) xs[i] = rx<RoundX>(__ldg(x + i));
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kGemvWarps;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5); o < out;
       o += warps) {
    const T* wr = w + o * k;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
    if constexpr (Vec) {
      constexpr int P = Weights<T>::kPer;
      constexpr int64_t kStep = 32 * P;
      for (int64_t i0 = static_cast<int64_t>(lane) * P; i0 < k; i0 += kStep * kGemvUnroll) {
        uint4 raw[kGemvUnroll];
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u) {
          const int64_t i = i0 + u * kStep;
          raw[u] = i < k ? __ldg(reinterpret_cast<const uint4*>(wr + i)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u) {
          const int64_t i = i0 + u * kStep;
          if (i >= k) break;
          float wv[P];
          Weights<T>::unpack(raw[u], wv);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            if (r < n) {
              const float4* xr = reinterpret_cast<const float4*>(xs + r * k + i);
              float sum = 0.f;
#pragma unroll
              for (int e = 0; e < P; e += 4) {
                const float4 xv = xr[e / 4];
                sum += wv[e] * xv.x + wv[e + 1] * xv.y + wv[e + 2] * xv.z + wv[e + 3] * xv.w;
              }
              acc[r] += sum;
            }
          }
        }
      }
    } else {
      for (int64_t i = lane; i < k; i += 32) {
        const float wv = Weights<T>::one(wr + i);
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (r < n) acc[r] += wv * xs[r * k + i];
      }
    }
    const float sc = scale ? scale[o] : 1.f, b = bias ? bias[o] : 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < n) {
        float v = acc[r];
        for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
        if (lane == r) {  // the rows' epilogues on different lanes
          if (scale) v = v * sc;
          if (bias) v = v + b;
          if (act == 1) v = x_sigmoid(v, 1.702f);  // quick_gelu
          if (act == 2) v = gelu_exact(v);         // exact GELU
          float& dst = y[r * out + o];
          dst = accumulate ? dst + v : v;
        }
      }
    }
  }
}

// The matrix-vector kernel over n rows, up to 8 a launch; where 8 rows of x do not fit in shared
// memory, fewer rows a launch (at least one: a row over kGemvSharedX floats takes the GEMM).
template <class T, bool RoundX>
void launch_gemv(const Backend& be, const float* x, int64_t n, int64_t k, const T* w, int64_t out,
                 const float* scale, const float* bias, int act, bool accumulate, float* y) {
  const bool vec = k % Weights<T>::kPer == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  const int64_t want = (out + kGemvWarps - 1) / kGemvWarps;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(want, 32 * int64_t{sm_count(be)}));
  const int64_t per = std::min<int64_t>(gemv_max_rows(WeightFormat::kF32), kGemvSharedX / k);
  for (int64_t r0 = 0; r0 < n; r0 += per) {
    const int rows = static_cast<int>(std::min<int64_t>(n - r0, per));
    const size_t smem = static_cast<size_t>(rows * k) * sizeof(float);
    launch(be, "linear: gemv", vec ? gemv_kernel<T, true, RoundX> : gemv_kernel<T, false, RoundX>,
           blocks, 32 * kGemvWarps, smem, x + r0 * k, rows, k, w, out, scale, bias, act, accumulate,
           y + r0 * out);
  }
}

// launch_gemv on packed weights stored as T.
template <class T, bool RoundX>
void gemv_packed(const Backend& be, const float* x, int64_t n, const PackedLinear& w, int act,
                 bool accumulate, float* y) {
  launch_gemv<T, RoundX>(be, x, n, w.in(), static_cast<const T*>(w.weight_data()), w.out(),
                         w.scales(), w.bias(), act, accumulate, y);
}

// Whether `n` rows take the matrix-vector kernel (LinearPath::kGemv: any n, 8 rows a launch).
bool use_gemv(int64_t n, const PackedLinear& w, const LinearOptions& opt) {
  if (opt.path == LinearPath::kGemm || w.in() > kGemvSharedX) return false;
  return opt.path == LinearPath::kGemv || n <= gemv_max_rows(w.format());
}

int act_code(const LinearOptions& opt) {
  return opt.act == LinearAct::kQuickGelu ? 1 : opt.act == LinearAct::kGeluErf ? 2 : 0;
}

LinearPlan plan(const Backend&, int64_t n, const PackedLinear& w, const LinearOptions& opt) {
  LinearPlan p;
  p.gemv = use_gemv(n, w, opt);
  p.x_rounded_to_bf16 = w.format() != WeightFormat::kF32;
  const std::string fmt(weight_format_name(w.format()));
  const bool eight = w.format() == WeightFormat::kInt8 || w.format() == WeightFormat::kFp8;
  p.kernel = p.gemv  ? "cuda gemv " + fmt
             : eight ? "cublas bf16 (" + fmt + " widened)"
                     : "cublas " + fmt;
  return p;
}

void linear(const Backend& be, const float* x, int64_t n, const PackedLinear& w, float* y,
            const LinearOptions& opt) {
  // The dispatcher (kernels/linear.cpp) checked the sizes, pointers and device.
  if (w.blocked()) throw InvalidArgument("linear: blocked weights are the CPU's layout");
  if (n > 2147483647 || w.in() > 2147483647 || w.out() > 2147483647)
    throw InvalidArgument("linear: a dimension over cuBLAS's int range");
  const int64_t k = w.in(), out = w.out();
  const int act = act_code(opt);
  if (use_gemv(n, w, opt)) {
    switch (w.format()) {  // the stored type; x rounded to bf16 unless the weights are f32
      case WeightFormat::kF32:
        return gemv_packed<float, false>(be, x, n, w, act, opt.accumulate, y);
      case WeightFormat::kBF16:
        return gemv_packed<uint16_t, true>(be, x, n, w, act, opt.accumulate, y);
      case WeightFormat::kInt8:
        return gemv_packed<int8_t, true>(be, x, n, w, act, opt.accumulate, y);
      case WeightFormat::kFp8:
        return gemv_packed<uint8_t, true>(be, x, n, w, act, opt.accumulate, y);
    }
  }
  cublasHandle_t h = cublas_of(be);
  const bool f32 = w.format() == WeightFormat::kF32;
  const void* a = x;                // [n, k]
  const void* b = w.weight_data();  // [out, k]
  if (!f32) {
    auto* xb = static_cast<__nv_bfloat16*>(device_scratch(be, kSlotX, size_t(n * k) * 2));
    launch(be, "linear: x to bf16", to_bf16_kernel, flat_blocks(n * k), kFlatThreads, 0, x, xb,
           n * k);
    a = xb;
    if (w.format() == WeightFormat::kInt8 || w.format() == WeightFormat::kFp8) {
      auto* wb = static_cast<__nv_bfloat16*>(device_scratch(be, kSlotW, size_t(out * k) * 2));
      if (w.format() == WeightFormat::kInt8)
        launch(be, "linear: int8 weights to bf16", i8_to_bf16_kernel, flat_blocks(out * k),
               kFlatThreads, 0, static_cast<const int8_t*>(w.weight_data()), wb, out * k);
      else
        launch(be, "linear: fp8 weights to bf16", e4m3_to_bf16_kernel, flat_blocks(out * k),
               kFlatThreads, 0, static_cast<const uint8_t*>(w.weight_data()), wb, out * k);
      b = wb;
    }
  }
  // The product lands in y, added to it by cuBLAS itself (beta 1) where nothing else is applied
  // first (a residual add without scales, bias or activation: the o and down projections); else
  // in a tile the epilogue applies and adds.
  const bool epilogue = w.scales() || w.bias() || act;
  const bool add_in_gemm = opt.accumulate && !epilogue;
  float* t = opt.accumulate && epilogue
                 ? static_cast<float*>(device_scratch(be, kSlotTile, size_t(n * out) * 4))
                 : y;
  // Row-major y[n, out] = x[n, k] W[out, k]^T is column-major y^T[out, n] = W^T x^T: cuBLAS's
  // A = W (op T, lda k), B = x (op N, ldb k), C = y (ldc out).
  const float one = 1.0f, zero = 0.0f;
  const float* beta = add_in_gemm ? &one : &zero;
  const cudaDataType_t ty = f32 ? CUDA_R_32F : CUDA_R_16BF;
  const CublasApi& api = cublas_api(be);
  const int dims[3] = {static_cast<int>(out), static_cast<int>(n), static_cast<int>(k)};
  if (sign_call(be, dims, b, a, t, ty, *beta))
    check_cublas(api,
                 api.gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out),
                             static_cast<int>(n), static_cast<int>(k), &one, b, ty,
                             static_cast<int>(k), a, ty, static_cast<int>(k), beta, t, CUDA_R_32F,
                             static_cast<int>(out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  if (epilogue)
    launch(be, "linear: epilogue", epilogue_kernel, flat_blocks(n * out), kFlatThreads, 0, t, n,
           out, w.scales(), w.bias(), act, opt.accumulate, y);
}

PackedLinear pack(const Backend& be, std::span<const Tensor* const> ws,
                  std::span<const Tensor* const> biases, WeightFormat fmt, WeightPlacement) {
  return pack_linear(be, host_of(be), ws, biases, fmt);
}

}  // namespace

const LinearOps kLinear{.pack = &pack, .linear = &linear, .plan = &plan};

}  // namespace mmrt::kernels::cuda
