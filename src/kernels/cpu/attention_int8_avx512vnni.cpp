// The int8 scores of the encoder attention (VarlenAttentionArgs::int8_scores, attention_gemm.cpp)
// on AVX512-VNNI: each key's heads quantised into the layout vpdpbusd reads, and the score tile
// S = (u8 q . s8 K^T - 128 * sum(K)) * q scale * k scale. The query rows come quantised as u8
// (q + 128, LinearKernels::quantize_rows_q8); the surplus 128 * sum(k) of each key is removed
// in int32, so the sums are the exact s8 x s8 ones.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/q8_avx512.h"

namespace mmrt::kernels::detail {

namespace {

constexpr int kRows = 6;  // query rows per register tile
constexpr int kCols = 4;  // blocks of 16 keys per register tile: 24 accumulators

// acc += a (u8) . b (s8) per group of four bytes. In assembly: GCC 12 compiles the intrinsic's
// accumulation over an array of accumulators into two register copies per instruction and
// stack spills (seen in its output), which halved the kernel's rate.
inline __attribute__((always_inline)) void dpbusd(__m512i& acc, __m512i a, __m512i b) {
  asm("vpdpbusd %[b], %[a], %[acc]" : [acc] "+v"(acc) : [a] "v"(a), [b] "v"(b));
}

// S rows [0, R) over keys [j0, j0 + 16 C). The accumulators start at the keys' -128 sum(k), so
// they end at the s8 x s8 sums.
template <int R, int C>
inline void score_tile(const uint8_t* q, int hd, const Int8Keys& k, int64_t j0, const float* qs,
                       float* s, int64_t lds) {
  __m512i acc[R][C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    const __m512i init =
        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(k.offset + j0 + 16 * c));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][c] = init;
  }
  const int8_t* kp = k.q + j0 * hd;  // blocks j0 / 16 .. j0 / 16 + C - 1, 16 * hd bytes each
  for (int g = 0; g < hd / 4; ++g) {
    __m512i kv[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) kv[c] = _mm512_loadu_si512(kp + c * 16 * hd + 64 * g);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t word;
      std::memcpy(&word, q + r * hd + 4 * g, 4);
      const __m512i b = _mm512_set1_epi32(word);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) dpbusd(acc[r][c], b, kv[c]);
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    const __m512 ks = _mm512_loadu_ps(k.scale + j0 + 16 * c);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)  // |sum| <= hd * 255 * 127 < 2^24: its conversion is exact
      _mm512_storeu_ps(
          s + r * lds + j0 + 16 * c,
          _mm512_mul_ps(_mm512_cvtepi32_ps(acc[r][c]), _mm512_mul_ps(ks, _mm512_set1_ps(qs[r]))));
  }
}

// The last n < R rows of a tile column (R counting down to the one that fits).
template <int R>
void score_tail(int n, const uint8_t* q, int hd, const Int8Keys& k, int64_t j0, const float* qs,
                float* s) {
  if constexpr (R > 0) {
    if (n == R) return score_tile<R, kCols>(q, hd, k, j0, qs, s, k.lenp);
    score_tail<R - 1>(n, q, hd, k, j0, qs, s);
  }
}

// One head's row x (less `mean` where given), hd a multiple of 16 (<= 512), quantised as
// LinearKernels::quantize_rows_q8 quantises a row: scale = max|x| / 127 (NaN for a NaN or
// infinite x, whose values are then 0), q = round-half-even(x / scale) clamped to +-127. Writes
// the int8 values as hd / 4 words of four; returns the scale, `sum` the sum of q.
inline float quantize_head(const float* x, const float* mean, int hd, int32_t* words,
                           int32_t& sum) {
  __m512 v[32];
  __m512 amax = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int i = 0; i < hd / 16; ++i) {
    v[i] = _mm512_loadu_ps(x + 16 * i);
    if (mean) v[i] = _mm512_sub_ps(v[i], _mm512_loadu_ps(mean + 16 * i));
    q8_track(v[i], amax, nan);
  }
  const float scale = q8_scale(_mm512_reduce_max_ps(amax), nan != 0);
  __m512i total = _mm512_setzero_si512();
  for (int i = 0; i < hd / 16; ++i) {
    const __m512i q = q8_quantise(v[i], scale);
    total = _mm512_add_epi32(total, q);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(words + 4 * i), _mm512_cvtsepi32_epi8(q));
  }
  sum = _mm512_reduce_add_epi32(total);
  return scale;
}

}  // namespace

void pack_key_int8(const float* key, const float* mean, int heads, int hd, int64_t t,
                   const Int8Keys* dst) {
  alignas(64) int32_t words[128];
  for (int h = 0; h < heads; ++h) {
    const Int8Keys& k = dst[h];
    int32_t sum = 0;
    k.scale[t] = quantize_head(key + static_cast<int64_t>(h) * hd,
                               mean + static_cast<int64_t>(h) * hd, hd, words, sum);
    k.offset[t] = 128 * sum;
    // Key t's word g at block t / 16, row g, lane t % 16.
    auto* kq = reinterpret_cast<int32_t*>(k.q + (t / 16) * 16 * hd) + t % 16;
    for (int g = 0; g < hd / 4; ++g) kq[16 * g] = words[g];
  }
}

void pack_query_int8(const float* row, int heads, int hd, int64_t t, float softmax_scale,
                     const Int8Queries* dst) {
  const __m128i flip = _mm_set1_epi8(static_cast<char>(0x80));
  alignas(64) int32_t words[128];
  for (int h = 0; h < heads; ++h) {
    int32_t sum = 0;
    dst[h].scale[t] =
        quantize_head(row + static_cast<int64_t>(h) * hd, nullptr, hd, words, sum) * softmax_scale;
    uint8_t* q = dst[h].q + t * hd;
    for (int i = 0; i < hd / 16; ++i)
      _mm_storeu_si128(
          reinterpret_cast<__m128i*>(q + 16 * i),
          _mm_xor_si128(_mm_load_si128(reinterpret_cast<const __m128i*>(words + 4 * i)), flip));
  }
}

void scores_int8(const uint8_t* q, const float* qs, int rows, int hd, const Int8Keys& k, float* s) {
  // Keys outer: a block of 64 keys (64 * hd bytes) stays in L1 while every query row passes.
  for (int64_t j0 = 0; j0 < k.lenp; j0 += 16 * kCols) {
    int r = 0;
    for (; r + kRows <= rows; r += kRows)
      score_tile<kRows, kCols>(q + static_cast<int64_t>(r) * hd, hd, k, j0, qs + r, s + r * k.lenp,
                               k.lenp);
    const uint8_t* qr = q + static_cast<int64_t>(r) * hd;
    float* sr = s + r * k.lenp;
    score_tail<kRows - 1>(rows - r, qr, hd, k, j0, qs + r, sr);
  }
}

}  // namespace mmrt::kernels::detail
