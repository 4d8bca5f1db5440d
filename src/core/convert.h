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

// Which implementation the vectorised entry points use on this CPU: "avx512", "avx2", "scalar".
const char* convert_isa();
// Test hook: force a variant ("avx512", "avx2", "scalar"); returns false if unsupported here.

}  // namespace mmrt
