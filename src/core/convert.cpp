#include "core/convert.h"

#include <cmath>
#include <cstring>
#include <string_view>

#include "core/convert_impl.h"
#include "core/isa.h"

namespace mmrt {

namespace {
uint32_t f2u(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float u2f(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

uint16_t f32_to_f16_scalar(float f) {
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | (mant ? 0x7e00u : 0x7c00u));
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into inf: correct
  return static_cast<uint16_t>(sign | h);
}

float f16_to_f32_scalar(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return u2f(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return u2f(sign);
    // Subnormal: value = mant * 2^-24, exact in f32.
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return u2f(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_bf16_scalar(float f) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN, as PyTorch does
  uint32_t bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + bias) >> 16);
}

float bf16_to_f32_scalar(uint16_t b) {
  return u2f(static_cast<uint32_t>(b) << 16);
}

uint8_t f32_to_e4m3(float f) {
  const uint32_t u = f2u(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7f;                // NaN
  if (a >= 0x43e00000u) return sign | 0x7e;               // >= 448 (and inf): saturate
  if (a < 0x3c800000u) {                                  // < 2^-6: subnormal steps of 2^-9
    const float steps = std::nearbyint(u2f(a) * 512.0f);  // exact scaling, then RNE
    return sign | static_cast<uint8_t>(steps);            // 8 is 2^-6, the first normal
  }
  int32_t e = static_cast<int32_t>(a >> 23) - 127 + 7;  // 1..15
  uint32_t keep = (a >> 20) & 7u;
  const uint32_t rem = a & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (keep & 1u))) {
    if (++keep == 8) keep = 0, ++e;
  }
  if (e > 15 || (e == 15 && keep == 7)) return sign | 0x7e;  // rounded past 448
  return sign | static_cast<uint8_t>((e << 3) | static_cast<int32_t>(keep));
}

float e4m3_to_f32(uint8_t q) {
  const uint32_t sign = static_cast<uint32_t>(q & 0x80) << 24;
  const uint32_t e = (q >> 3) & 15u, m = q & 7u;
  if (e == 15 && m == 7) return u2f(sign | 0x7fc00000u);
  if (e == 0) return u2f(sign | f2u(static_cast<float>(m) * 0.001953125f));  // m * 2^-9
  return u2f(sign | ((e + 120) << 23) | (m << 20));
}

namespace detail {
namespace {
void s_f32_to_f16(const float* s, uint16_t* d, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16_scalar(s[i]);
}
void s_f16_to_f32(const uint16_t* s, float* d, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = f16_to_f32_scalar(s[i]);
}
void s_f32_to_bf16(const float* s, uint16_t* d, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16_scalar(s[i]);
}
void s_bf16_to_f32(const uint16_t* s, float* d, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = bf16_to_f32_scalar(s[i]);
}
}  // namespace

const ConvertFns& convert_fns_scalar() {
  static const ConvertFns f{"scalar", s_f32_to_f16, s_f16_to_f32, s_f32_to_bf16, s_bf16_to_f32};
  return f;
}
}  // namespace detail

namespace detail {
const IsaVariants<ConvertFns>& convert_variants() {
  static const IsaVariants<ConvertFns> v{{Isa::kAvx512, convert_fns_avx512},
                                         {Isa::kAvx2, convert_fns_avx2},
                                         {Isa::kPortable, convert_fns_scalar}};
  return v;
}
}  // namespace detail

namespace {
const detail::ConvertFns& fns() {
  static const detail::ConvertFns& f = detail::convert_variants().best();
  return f;
}
}  // namespace

void f32_to_f16(const float* s, uint16_t* d, size_t n) {
  fns().f32_to_f16(s, d, n);
}
void f16_to_f32(const uint16_t* s, float* d, size_t n) {
  fns().f16_to_f32(s, d, n);
}
void f32_to_bf16(const float* s, uint16_t* d, size_t n) {
  fns().f32_to_bf16(s, d, n);
}
void bf16_to_f32(const uint16_t* s, float* d, size_t n) {
  fns().bf16_to_f32(s, d, n);
}
const char* convert_isa() {
  return fns().isa;
}

}  // namespace mmrt
