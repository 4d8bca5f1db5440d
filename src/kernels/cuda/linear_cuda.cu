// The CUDA backend's linear layers (kernels/linear.h): every row count through cuBLAS's GEMM with
// f32 accumulation, then one epilogue kernel (the per-channel int8 scale, the bias, the
// activation, the residual add).
//   f32 weights:  x and W in f32 (CUBLAS_COMPUTE_32F: no TF32), exact as the CPU's f32 path.
//   bf16 weights: x rounded to bf16 once, bf16 x bf16 with f32 sums (x_rounded_to_bf16).
//   int8 weights: each call widens W to bf16 (exact: |q| <= 127), then as bf16, the scale in the
//                 epilogue. Int8Gemm::kQ8Row and Int8Activations change nothing here yet.
// A first version: correct against the CPU references; the decode-sized GEMV kernel, the int8
// GEMM without widening and the fused cuBLASLt epilogues are still to come.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <string>

#include "core/error.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/cuda_pack.h"
#include "kernels/linear.h"

namespace mmrt::kernels::cuda {

namespace {

// Scratch slots of the linear op (cuda_internal.h: 0-2 are the step metadata's).
constexpr int kSlotX = 3, kSlotW = 4, kSlotTile = 5;

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

LinearPlan plan(const Backend&, int64_t, const PackedLinear& w, const LinearOptions&) {
  LinearPlan p;
  p.gemv = false;
  p.x_rounded_to_bf16 = w.format() != WeightFormat::kF32;
  p.kernel = w.format() == WeightFormat::kF32    ? "cublas f32"
             : w.format() == WeightFormat::kBF16 ? "cublas bf16"
                                                 : "cublas bf16 (int8 widened)";
  return p;
}

void linear(const Backend& be, const float* x, int64_t n, const PackedLinear& w, float* y,
            const LinearOptions& opt) {
  // The dispatcher (kernels/linear.cpp) checked the sizes, pointers and device.
  if (w.blocked()) throw InvalidArgument("linear: blocked weights are the CPU's layout");
  if (n > 2147483647 || w.in() > 2147483647 || w.out() > 2147483647)
    throw InvalidArgument("linear: a dimension over cuBLAS's int range");
  const int64_t k = w.in(), out = w.out();
  cudaStream_t st = stream_of(be);
  cublasHandle_t h = cublas_of(be);
  const bool f32 = w.format() == WeightFormat::kF32;
  const void* a = x;                // [n, k]
  const void* b = w.weight_data();  // [out, k]
  if (!f32) {
    auto* xb = static_cast<__nv_bfloat16*>(device_scratch(be, kSlotX, size_t(n * k) * 2));
    to_bf16_kernel<<<flat_blocks(n * k), kFlatThreads, 0, st>>>(x, xb, n * k);
    check_launch("linear: x to bf16");
    a = xb;
    if (w.format() == WeightFormat::kInt8) {
      auto* wb = static_cast<__nv_bfloat16*>(device_scratch(be, kSlotW, size_t(out * k) * 2));
      i8_to_bf16_kernel<<<flat_blocks(out * k), kFlatThreads, 0, st>>>(
          static_cast<const int8_t*>(w.weight_data()), wb, out * k);
      check_launch("linear: int8 weights to bf16");
      b = wb;
    }
  }
  // The product lands in y unless it is to be added to y.
  float* t =
      opt.accumulate ? static_cast<float*>(device_scratch(be, kSlotTile, size_t(n * out) * 4)) : y;
  // Row-major y[n, out] = x[n, k] W[out, k]^T is column-major y^T[out, n] = W^T x^T: cuBLAS's
  // A = W (op T, lda k), B = x (op N, ldb k), C = y (ldc out).
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType_t ty = f32 ? CUDA_R_32F : CUDA_R_16BF;
  const CublasApi& api = cublas_api(be);
  check_cublas(api,
               api.gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(n),
                           static_cast<int>(k), &one, b, ty, static_cast<int>(k), a, ty,
                           static_cast<int>(k), &zero, t, CUDA_R_32F, static_cast<int>(out),
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
  const int act = opt.act == LinearAct::kQuickGelu ? 1 : opt.act == LinearAct::kGeluErf ? 2 : 0;
  if (w.scales() || w.bias() || act || opt.accumulate) {
    epilogue_kernel<<<flat_blocks(n * out), kFlatThreads, 0, st>>>(t, n, out, w.scales(), w.bias(),
                                                                   act, opt.accumulate, y);
    check_launch("linear: epilogue");
  }
}

PackedLinear pack(const Backend& be, std::span<const Tensor* const> ws,
                  std::span<const Tensor* const> biases, WeightFormat fmt, WeightPlacement) {
  return pack_linear(be, host_of(be), ws, biases, fmt);
}

}  // namespace

const LinearOps kLinear{.pack = &pack, .linear = &linear, .plan = &plan};

}  // namespace mmrt::kernels::cuda
