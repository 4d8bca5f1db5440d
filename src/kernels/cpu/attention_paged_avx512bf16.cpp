// Paged attention's prefill rows in bf16 products (PagedAttentionArgs::bf16, bf16 caches,
// AVX512-BF16): the exact kernel's work item (attention_kernel.h: chunks of 32 keys, online
// softmax in f32) with its two products on vdpbf16ps, which multiplies pairs of bf16 values and
// sums each pair into one f32 lane, at twice the f32 FMA's rate.
//
//   S = Q . K^T: q (scaled) rounded to bf16 once per item, as pairs of dimensions (d, d+1);
//     each chunk's keys repacked from the cache's transposed rows (dimension d of 16 keys, then
//     d+1) into lanes of one key holding both dimensions.
//   O += P . V: the probabilities rounded to bf16 as pairs of keys (t, t+1); each chunk's values
//     repacked from the cache's rows (key t, then t+1) into lanes of one dimension holding both
//     keys. l sums the rounded probabilities, so O / l is a weighted mean of the values.
//
// The repacking (a widening, a shift and an or per 16 lanes) is paid once per chunk and item,
// against 36 query rows' products.
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/attention_kernel.h"
#include "kernels/cpu/exp_softmax_avx512.h"

namespace mmrt::kernels::detail {

namespace {

using simd::Vec512;

// Lanes [0, n) set (n clamped to [0, 16]).
inline __mmask16 first_lanes(int n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// Two rows of 16 bf16 values interleaved: lane i = (a[i], b[i]), a in the low half (the first
// of vdpbf16ps's pair).
inline __m512i pair_rows(const uint16_t* a, const uint16_t* b) {
  const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
  const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
  return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

inline __m512i first_row_only(const uint16_t* a) {
  return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
}

// S for MR query rows (bf16 pairs, hd / 2 each) x the chunk's 32 keys (kp: [hd / 2][2] vectors),
// then the online-softmax update; P: the rows' probabilities, bf16 [MR][kAttnChunk].
template <int MR>
void qk_rows(const uint32_t* Q, int hd2, const __m512i* kp, const int* hi, float* m, float* l,
             float* corr, uint16_t* P) {
  __m512 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int p = 0; p < hd2; ++p) {
    const __m512bh k0 = (__m512bh)_mm512_load_si512(kp + 2 * p);
    const __m512bh k1 = (__m512bh)_mm512_load_si512(kp + 2 * p + 1);
    for (int r = 0; r < MR; ++r) {
      const __m512bh q = (__m512bh)_mm512_set1_epi32(static_cast<int>(Q[r * hd2 + p]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], q, k0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], q, k1);
    }
  }
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);
  for (int r = 0; r < MR; ++r) {
    const __mmask16 m0 = first_lanes(hi[r]), m1 = first_lanes(hi[r] - 16);
    const __m512 s0 = _mm512_mask_mov_ps(neg_inf, m0, acc[r][0]);
    const __m512 s1 = _mm512_mask_mov_ps(neg_inf, m1, acc[r][1]);
    // Finite: lane 0 is always visible.
    const float m_new = std::max(m[r], _mm512_reduce_max_ps(_mm512_max_ps(s0, s1)));
    corr[r] = std::exp(m[r] - m_new);  // 0 on the first chunk (m = -inf)
    const __m512 top = _mm512_set1_ps(m_new);
    const __m512 e0 = _mm512_maskz_mov_ps(m0, exp_softmax(_mm512_sub_ps(s0, top)));
    const __m512 e1 = _mm512_maskz_mov_ps(m1, exp_softmax(_mm512_sub_ps(s1, top)));
    const __m512bh b = _mm512_cvtne2ps_pbh(e1, e0);  // keys 0-15 from e0, 16-31 from e1
    _mm512_storeu_si512(P + r * kAttnChunk, (__m512i)b);
    // The sum of what the products will use: the rounded probabilities, pair by pair.
    const __m512 sum = _mm512_dpbf16_ps(_mm512_setzero_ps(), b, ones);
    l[r] = l[r] * corr[r] + _mm512_reduce_add_ps(sum);
    m[r] = m_new;
  }
}

// O[r, 16 * (j0 + j) ...] = O * corr[r] + sum over key pairs q of P[r, pair q] . vp[q][j0 + j]
// for MP rows and ND vectors of 16 dimensions (vp: [pairs][nvec]).
template <int MP, int ND>
void pv_tile(float* O, int hd, int j0, const float* corr, const uint32_t* P, const __m512i* vp,
             int nvec, int pairs) {
  __m512 acc[MP][ND];
  for (int r = 0; r < MP; ++r) {
    const __m512 c = _mm512_set1_ps(corr[r]);
    for (int j = 0; j < ND; ++j)
      acc[r][j] = _mm512_mul_ps(_mm512_loadu_ps(O + r * hd + (j0 + j) * 16), c);
  }
  for (int q = 0; q < pairs; ++q) {
    __m512bh v[ND];
    for (int j = 0; j < ND; ++j) v[j] = (__m512bh)_mm512_load_si512(vp + q * nvec + j0 + j);
    for (int r = 0; r < MP; ++r) {
      const __m512bh p = (__m512bh)_mm512_set1_epi32(static_cast<int>(P[r * kAttnChunk / 2 + q]));
      for (int j = 0; j < ND; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], p, v[j]);
    }
  }
  for (int r = 0; r < MP; ++r)
    for (int j = 0; j < ND; ++j) _mm512_storeu_ps(O + r * hd + (j0 + j) * 16, acc[r][j]);
}

constexpr int kND = 4;  // vectors of 16 dimensions per P . V tile

template <int MP, int... I>
constexpr auto pv_tile_table(std::integer_sequence<int, I...>) {
  return std::array{&pv_tile<MP, I + 1>...};
}

template <int MP>
void pv_rows(float* O, int hd, const float* corr, const uint32_t* P, const __m512i* vp, int pairs) {
  const int nvec = hd / 16;
  int j = 0;
  for (; j + kND <= nvec; j += kND) pv_tile<MP, kND>(O, hd, j, corr, P, vp, nvec, pairs);
  constexpr auto tail = pv_tile_table<MP>(std::make_integer_sequence<int, kND - 1>{});
  if (j < nvec) tail[nvec - j - 1](O, hd, j, corr, P, vp, nvec, pairs);
}

template <int... I>
constexpr auto qk_rows_table(std::integer_sequence<int, I...>) {
  return std::array{&qk_rows<I + 1>...};
}

template <int... I>
constexpr auto pv_rows_table(std::integer_sequence<int, I...>) {
  return std::array{&pv_rows<I + 1>...};
}

// The bf16 products for run_item (attention_kernel.h). The pack buffer holds the chunk's keys
// [hd / 2][2] and then its values [16 pairs][hd / 16], one __m512i each (kAttnChunk * hd floats).
struct Bf16Products {
  static constexpr int MQ = 12, MP = 6;

  static void load_q(const float* src, float scale, int hd, float* Q, int r) {
    auto* dst = reinterpret_cast<uint16_t*>(Q) + int64_t(r) * hd;  // bf16 [hd]: hd / 2 pairs
    const __m512 vs = _mm512_set1_ps(scale);
    for (int d = 0; d < hd; d += 16)  // rounded as P is (to nearest even)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + d),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(src + d), vs)));
  }

  static void pack_chunk(const uint16_t* const* kvec, const uint16_t* const* vrow, int nvalid,
                         int hd, int32_t seg, float* pack) {
    auto* kp = reinterpret_cast<__m512i*>(pack);
    for (int p = 0; p < hd / 2; ++p)  // K^T rows 2p and 2p + 1 of each 16 keys
      for (int j = 0; j < 2; ++j)
        _mm512_store_si512(kp + 2 * p + j, pair_rows(kvec[j] + int64_t(2 * p) * seg,
                                                     kvec[j] + int64_t(2 * p + 1) * seg));
    __m512i* vp = kp + hd;
    const int nvec = hd / 16;
    for (int t = 0; t < nvalid; t += 2)  // keys past nvalid: zero values (never stale ones)
      for (int j = 0; j < nvec; ++j)
        _mm512_store_si512(vp + (t / 2) * nvec + j,
                           t + 1 < nvalid ? pair_rows(vrow[t] + j * 16, vrow[t + 1] + j * 16)
                                          : first_row_only(vrow[t] + j * 16));
  }

  static void qk(int mr, const float* Q, int rg, int hd, const uint16_t* const*, int32_t,
                 const float* pack, const int* hi, float* m, float* l, float* corr, float* P) {
    constexpr auto table = qk_rows_table(std::make_integer_sequence<int, MQ>{});
    const auto* q = reinterpret_cast<const uint32_t*>(Q) + int64_t(rg) * (hd / 2);
    table[mr - 1](q, hd / 2, reinterpret_cast<const __m512i*>(pack), hi, m, l, corr,
                  reinterpret_cast<uint16_t*>(P));
  }

  static void pv(int mp, float* O, int hd, const float* corr, const float* P, int pg,
                 const uint16_t* const*, const float* pack, int nv) {
    constexpr auto table = pv_rows_table(std::make_integer_sequence<int, MP>{});
    const auto* p = reinterpret_cast<const uint32_t*>(P) + pg * (kAttnChunk / 2);
    table[mp - 1](O, hd, corr, p, reinterpret_cast<const __m512i*>(pack) + hd, (nv + 1) / 2);
  }
};

}  // namespace

void run_item_bf16_products(const AttnProblem& pb, const AttnItem& it) {
  simd::run_item<Vec512, uint16_t, Bf16Products>(pb, it);
}

}  // namespace mmrt::kernels::detail
