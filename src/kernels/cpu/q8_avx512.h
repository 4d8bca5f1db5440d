// Internal: the int8 quantisation rule on AVX-512, shared by the VNNI kernels
// (linear_avx512vnni.cpp: x per block or per row; attention_int8_avx512vnni.cpp: q and k per
// head). Compiled with their flags; anonymous namespace as in gemv_driver.h.
#pragma once

#include <immintrin.h>

#include <limits>

namespace mmrt::kernels::detail {
namespace {  // NOLINT(google-build-namespaces)

// Folds v into the running largest |x| and the mask of lanes that held a NaN (the two things the
// scale is made of).
inline void q8_track(__m512 v, __m512& amax, __mmask16& nan) {
  amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
  nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
}

// The scale of a row (or block) whose largest |x| is `top`: top / 127; NaN when it holds a NaN
// or an infinity, so that its products come out NaN as the float kernels' do, never silently
// finite.
inline float q8_scale(float top, bool nan) {
  return nan || !(top <= std::numeric_limits<float>::max())
             ? std::numeric_limits<float>::quiet_NaN()
             : top / 127.f;
}

// x / scale rounded half to even (the f32 division, as the references do), clamped to +-127;
// zero where the scale is not positive (an all-zero or NaN row).
inline __m512i q8_quantise(__m512 x, float scale) {
  __m512i q = _mm512_setzero_si512();
  if (scale > 0.f) q = _mm512_cvtps_epi32(_mm512_div_ps(x, _mm512_set1_ps(scale)));
  return _mm512_max_epi32(_mm512_min_epi32(q, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
}

}  // namespace
}  // namespace mmrt::kernels::detail
