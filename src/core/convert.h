// f32 <-> f16 <-> bf16 conversion, round-to-nearest-even, bit-compatible with PyTorch/numpy
// (subnormals kept, infinities kept; NaN stays NaN but its payload is not specified).
// Vectorised with run-time ISA selection (AVX-512 / AVX2+F16C / portable).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mmrt {

void f32_to_f16(const float* src, uint16_t* dst, size_t n);
void f16_to_f32(const uint16_t* src, float* dst, size_t n);
void f32_to_bf16(const float* src, uint16_t* dst, size_t n);
void bf16_to_f32(const uint16_t* src, float* dst, size_t n);

// Scalar forms (portable reference implementations).
uint16_t f32_to_f16_scalar(float f);
float f16_to_f32_scalar(uint16_t h);
uint16_t f32_to_bf16_scalar(float f);
float bf16_to_f32_scalar(uint16_t b);

// FP8 E4M3 (OCP "e4m3fn", PyTorch's float8_e4m3fn: 4 exponent bits with bias 7, 3 mantissa
// bits, subnormals, no infinities, largest finite 448, NaN 0x7F / 0xFF): round to nearest even,
// magnitudes past 448 saturate to 448 (what weight quantisation wants; not torch's cast, which
// gives NaN there), NaN to 0x7F with its sign. Every E4M3 value is exact in f32 (and in bf16).
uint8_t f32_to_e4m3(float f);
float e4m3_to_f32(uint8_t q);
constexpr float kE4m3Max = 448.0f;

// Which implementation the vectorised entry points use on this CPU: "avx512", "avx2", "scalar".
const char* convert_isa();
// Test hook: force a variant ("avx512", "avx2", "scalar"); returns false if unsupported here.

}  // namespace mmrt
