// The row softmax of the GEMM-based encoder attention (attention_gemm.cpp), on AVX-512 with
// AVX512-BF16 conversions: per row, the max of the first `len` scores, exp(s - max) summed in
// f32, and P written as bf16 with zeros up to `lenp`.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/ops_simd.h"

namespace mmrt::kernels::detail {

void softmax_rows_bf16(const float* s, int rows, int len, int lenp, uint16_t* p, float* sums) {
  using V = simd::Vec512;
  for (int r = 0; r < rows; ++r) {
    const float* sr = s + static_cast<int64_t>(r) * lenp;
    uint16_t* pr = p + static_cast<int64_t>(r) * lenp;
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int c = 0; c < len; c += 16) {
      const auto m = static_cast<__mmask16>((1u << std::min(16, len - c)) - 1);
      mx = _mm512_mask_max_ps(mx, m, mx, _mm512_maskz_loadu_ps(m, sr + c));
    }
    const __m512 top = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (int c = 0; c < lenp; c += 16) {
      const int valid = std::clamp(len - c, 0, 16);
      const auto m = static_cast<__mmask16>((1u << valid) - 1);
      __m512 e =
          _mm512_maskz_mov_ps(m, V::exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sr + c), top)));
      // The sum of what the products will use: the bf16-rounded probabilities.
      const __m256bh b = _mm512_cvtneps_pbh(e);
      e = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)b), 16));
      sum = _mm512_add_ps(sum, e);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pr + c), (__m256i)b);
    }
    sums[r] = _mm512_reduce_add_ps(sum);
  }
}

}  // namespace mmrt::kernels::detail
