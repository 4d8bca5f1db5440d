// Internal to the CUDA backend: the device functions its kernels share, one definition each
// (the element-wise ops, the linear epilogue and attention use the same ones).
#pragma once

#include <cstdint>

namespace mmrt::kernels::cuda {

// bf16 bits (the upper half of an f32) to f32, exactly.
__device__ __forceinline__ float bf16_bits_to_f32(uint16_t v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

// x * sigmoid(a x) = x / (1 + exp(-a x)): SiLU (a = 1), quick_gelu (a = 1.702).
__device__ __forceinline__ float x_sigmoid(float x, float a) {
  return x / (1.0f + expf(-a * x));
}

// Exact GELU: x/2 * (1 + erf(x / sqrt2)) = x/2 * erfc(-x / sqrt2).
__device__ __forceinline__ float gelu_exact(float x) {
  return 0.5f * x * erfcf(-x * 0.70710678118654752f);
}

}  // namespace mmrt::kernels::cuda
