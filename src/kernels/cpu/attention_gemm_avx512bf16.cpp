// The element-wise parts of the GEMM-based encoder attention (attention_gemm.cpp), on AVX-512
// with AVX512-BF16 conversions: the query tile's scaling to bf16, the row softmax (per row, the
// max of the first `len` scores, exp(s - max) summed in f32, and P written as bf16 with zeros up
// to `lenp`) and the output rows' normalisation.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/exp_softmax_avx512.h"

namespace mmrt::kernels::detail {

void softmax_rows_bf16(const float* s, int rows, int len, int lenp, uint16_t* p, float* sums) {
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
    // Whole runs of 32 scores: two exp vectors rounded to bf16 by one instruction, and their
    // rounded values summed by a dot product with ones (vdpbf16ps: the pairs' sums in f32).
    const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);
    int c = 0;
    for (; c + 32 <= len; c += 32) {
      const __m512 e0 = exp_softmax(_mm512_sub_ps(_mm512_loadu_ps(sr + c), top));
      const __m512 e1 = exp_softmax(_mm512_sub_ps(_mm512_loadu_ps(sr + c + 16), top));
      const __m512bh b = _mm512_cvtne2ps_pbh(e1, e0);
      sum = _mm512_dpbf16_ps(sum, b, ones);
      _mm512_storeu_si512(pr + c, (__m512i)b);
    }
    for (; c < lenp; c += 16) {
      const int valid = std::clamp(len - c, 0, 16);
      const auto m = static_cast<__mmask16>((1u << valid) - 1);
      __m512 e =
          _mm512_maskz_mov_ps(m, exp_softmax(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sr + c), top)));
      // The sum of what the products will use: the bf16-rounded probabilities.
      const __m256bh b = _mm512_cvtneps_pbh(e);
      e = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)b), 16));
      sum = _mm512_add_ps(sum, e);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pr + c), (__m256i)b);
    }
    sums[r] = _mm512_reduce_add_ps(sum);
  }
}

void scale_rows_bf16(const float* src, int64_t src_stride, int rows, int rows_pad, int hd,
                     int hd_pad, float scale, uint16_t* dst) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int r = 0; r < rows_pad; ++r) {
    const float* sr = src + static_cast<int64_t>(r) * src_stride;
    uint16_t* dr = dst + static_cast<int64_t>(r) * hd_pad;
    for (int d = 0; d < hd_pad; d += 16) {
      const auto m = static_cast<__mmask16>((1u << std::clamp(hd - d, 0, 16)) - 1);
      // Rounded as P below is (vcvtneps2bf16: to nearest, ties to even); unlike f32_to_bf16 it
      // flushes a subnormal product to zero. Measured: scaling in C++ and one f32_to_bf16 call
      // per tile made the 1024-key attention ~10 % slower on one thread.
      const __m512 v =
          r < rows ? _mm512_mul_ps(_mm512_maskz_loadu_ps(m, sr + d), vs) : _mm512_setzero_ps();
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dr + d), (__m256i)_mm512_cvtneps_pbh(v));
    }
  }
}

void normalize_rows(const float* o, const float* sums, int rows, int hd, float* dst,
                    int64_t dst_stride) {
  for (int r = 0; r < rows; ++r) {
    const __m512 inv = _mm512_set1_ps(sums[r] > 0 ? 1.0f / sums[r] : 0.0f);
    const float* orow = o + static_cast<int64_t>(r) * hd;
    float* dr = dst + static_cast<int64_t>(r) * dst_stride;
    for (int d = 0; d < hd; d += 16) {
      const auto m = static_cast<__mmask16>((1u << std::min(16, hd - d)) - 1);
      _mm512_mask_storeu_ps(dr + d, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, orow + d), inv));
    }
  }
}

}  // namespace mmrt::kernels::detail
