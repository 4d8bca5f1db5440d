// Portable matrix-vector kernels: plain C++ for any x86-64 (or other) CPU, also the baseline the
// vector variants are tested against. One output row at a time against every input row, eight
// partial sums per dot product so the compiler can vectorise with the baseline ISA.
#include <cstring>

#include "kernels/cpu/gemv_driver.h"

namespace mmrt::kernels::detail {

namespace {

constexpr int kLanes = 8;

template <typename T>
void gemv(const GemvArgs& a, int64_t o0, int64_t o1) {
  const auto* w = static_cast<const T*>(a.w);
  for (int64_t o = o0; o < o1; ++o) {
    const T* wr = w + o * a.ldw;  // [k]
    for (int64_t j = 0; j < a.n; ++j) {
      const float* xr = a.x + j * a.ldx;  // [k]
      float part[kLanes] = {};
      int64_t k = 0;
      for (; k + kLanes <= a.k; k += kLanes)
        for (int l = 0; l < kLanes; ++l) part[l] += widen(wr[k + l]) * xr[k + l];
      float s = 0.f;
      for (; k < a.k; ++k) s += widen(wr[k]) * xr[k];
      for (int l = 0; l < kLanes; ++l) s += part[l];
      if (a.scale) s *= a.scale[o];
      if (a.bias) s += a.bias[o];
      a.y[j * a.ldy + o] = s;
    }
  }
}

// |q| <= 127 is exact in bf16: the f32 bits of a small integer have 16 zero low bits.
void i8_to_bf16(const int8_t* q, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(q[i]);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    dst[i] = static_cast<uint16_t>(u >> 16);
  }
}
void i8_to_f32(const int8_t* q, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(q[i]);
}

uint64_t stream_read(const void* p, size_t bytes) {
  const auto* u = static_cast<const uint64_t*>(p);
  uint64_t acc[8] = {};
  for (size_t i = 0; i + 8 <= bytes / 8; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] ^= u[i + l];
  uint64_t s = 0;
  for (uint64_t v : acc) s += v;
  return s;
}

}  // namespace

void i8_to_bf16_portable(const int8_t* q, uint16_t* dst, size_t n) {
  i8_to_bf16(q, dst, n);
}
void i8_to_f32_portable(const int8_t* q, float* dst, size_t n) {
  i8_to_f32(q, dst, n);
}

const LinearKernels& linear_kernels_portable() {
  static const LinearKernels t{.isa = "portable",
                               .gemv_f32 = gemv<float>,
                               .gemv_bf16 = gemv<uint16_t>,
                               .gemv_i8 = gemv<int8_t>,
                               .prep_x_bf16 = nullptr,
                               .i8_to_bf16 = i8_to_bf16,
                               .i8_to_f32 = i8_to_f32,
                               .stream_read = stream_read,
                               .native_bf16_gemm = false};
  return t;
}

}  // namespace mmrt::kernels::detail
