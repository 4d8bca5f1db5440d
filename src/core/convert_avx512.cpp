// AVX-512 conversions (compiled with -mavx512*; only called when the CPU has them).
#include <immintrin.h>

#include "core/convert.h"
#include "core/convert_impl.h"

namespace mmrt::detail {
namespace {

void f32_to_f16(const float* s, uint16_t* d, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), h);
  }
  for (; i < n; ++i) d[i] = f32_to_f16_scalar(s[i]);
}

void f16_to_f32(const uint16_t* s, float* d, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))));
  for (; i < n; ++i) d[i] = f16_to_f32_scalar(s[i]);
}

void f32_to_bf16(const float* s, uint16_t* d, size_t n) {
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff),
                qnan = _mm512_set1_epi32(0x7fc0);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 x = _mm512_loadu_ps(s + i);
    __m512i u = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, bias)), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, qnan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm512_cvtepi32_epi16(r));
  }
  for (; i < n; ++i) d[i] = f32_to_bf16_scalar(s[i]);
}

void bf16_to_f32(const uint16_t* s, float* d, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    _mm512_storeu_ps(d + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) d[i] = bf16_to_f32_scalar(s[i]);
}

}  // namespace

const ConvertFns& convert_fns_avx512() {
  static const ConvertFns f{"avx512", f32_to_f16, f16_to_f32, f32_to_bf16, bf16_to_f32};
  return f;
}

}  // namespace mmrt::detail
