// Internal: the softmax's fast exp on AVX-512, for kernels whose probabilities are rounded to
// bf16 (compiled with AVX-512 flags only: the *_avx512bf16.cpp files).
#pragma once

#include <immintrin.h>

#include "kernels/cpu/ops_simd.h"

namespace mmrt::kernels::detail {

// exp(x) for the softmax's x = s - max <= 0, as 2^t with t = x log2(e): n = round(t),
// f = t - n in [-1/2, 1/2], 2^f by a degree-4 polynomial (relative error < 3e-6 on [-1/2, 1/2],
// fitted for the largest; with t = x log2(e) rounded in f32, up to 6.3e-6 measured near x = -86:
// under a hundredth of P's bf16 rounding), times 2^n
// (vscalefps). t is held at -150 (NaN passes: it must reach the output), where 2^t underflows to
// zero or a subnormal, which the bf16 conversion flushes to zero. Half the operations of the
// f32-exact exp (ops_simd.h); the softmax was 35 % of the attention's time with that one.
inline __m512 exp_softmax(__m512 x) {
  const __m512 t =
      _mm512_max_ps(_mm512_set1_ps(-150.f), _mm512_mul_ps(x, _mm512_set1_ps(simd::kLog2e)));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(0.009570068679749966f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.055917806923389435f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.240247443318367f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931218504905701f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.9999992847442627f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace mmrt::kernels::detail
