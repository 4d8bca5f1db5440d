// Paged attention's prefill rows in bf16 products (PagedAttentionArgs::bf16, bf16 caches,
// AVX512-BF16): the exact kernel's work item (attention_kernel.h: an online softmax in f32 over
// chunks of keys) with its two products on vdpbf16ps, which multiplies pairs of bf16 values and
// sums each pair into one f32 lane, at twice the f32 FMA's rate. Chunks of 64 keys (the exact
// kernel's 32 would pay the softmax's reductions and the output tile's reload twice as often).
//
//   S = Q . K^T: q (scaled) rounded to bf16 once per item, as pairs of dimensions (d, d+1);
//     each chunk's keys repacked from the cache's transposed rows (dimension d of 16 keys, then
//     d+1) into lanes of one key holding both dimensions.
//   O += P . V: the probabilities rounded to bf16 as pairs of keys (t, t+1); each chunk's values
//     repacked from the cache's rows (key t, then t+1) into lanes of one dimension holding both
//     keys. l sums the rounded probabilities (in 16 partial sums per row), so O / l is a
//     weighted mean of the values.
//
// The repacking (a widening, a shift and an or per 16 lanes) is paid once per chunk and item,
// against the item's 72 query rows (attention_cpu.cpp). Measured on one Zen 5 core, 512 queries
// over 4,608 keys, 12 heads of 128 in 2 groups: 1.9-2.1x the exact kernel on the same bf16 cache.
#include <immintrin.h>

#include <algorithm>
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

constexpr int kLaneSums = 16;  // a row's probability sum, as 16 partial sums
constexpr int kChunk = 64;     // keys per online-softmax update: 4 vectors, 32 pairs
constexpr int kKeyVecs = kChunk / 16, kPairs = kChunk / 2;

// S for MR query rows (bf16 pairs, hd / 2 each) x the chunk's keys (kp: [hd / 2][kKeyVecs]
// vectors), then the online-softmax update; P: the rows' probabilities, bf16 [MR][kChunk];
// l: the rows' sums [MR][kLaneSums].
template <int MR>
void qk_rows(const uint32_t* Q, int hd2, const __m512i* kp, const int* hi, float* m, float* l,
             float* corr, uint16_t* P) {
  __m512 acc[MR][kKeyVecs];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < kKeyVecs; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int p = 0; p < hd2; ++p) {
    __m512bh k[kKeyVecs];
    for (int j = 0; j < kKeyVecs; ++j) k[j] = (__m512bh)_mm512_load_si512(kp + kKeyVecs * p + j);
    for (int r = 0; r < MR; ++r) {
      const __m512bh q = (__m512bh)_mm512_set1_epi32(static_cast<int>(Q[r * hd2 + p]));
      for (int j = 0; j < kKeyVecs; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], q, k[j]);
    }
  }
  // The rows' new maxima (finite: lane 0 is always visible), then every row's rescaling of its
  // sums and output, exp(m - m_new), in one vector (0 on the first chunk, m = -inf).
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __mmask16 vis[MR][kKeyVecs];
  alignas(64) float top[16];
  for (int r = 0; r < MR; ++r) {
    __m512 mx = neg_inf;
    for (int j = 0; j < kKeyVecs; ++j) {
      vis[r][j] = first_lanes(hi[r] - 16 * j);
      acc[r][j] = _mm512_mask_mov_ps(neg_inf, vis[r][j], acc[r][j]);
      mx = _mm512_max_ps(mx, acc[r][j]);
    }
    top[r] = std::max(m[r], _mm512_reduce_max_ps(mx));
  }
  constexpr __mmask16 kRows = __mmask16((1u << MR) - 1);
  const __m512 m_new = _mm512_maskz_load_ps(kRows, top);
  const __m512 m_old = _mm512_maskz_loadu_ps(kRows, m);
  // Exactly 1 where the maximum stayed: the polynomial's exp(0) is 1 - 7e-7, which every chunk
  // after the maximum would otherwise take off the earlier ones (0.15 % over 2,048 chunks).
  const __m512 c = exp_softmax(_mm512_sub_ps(m_old, m_new));
  _mm512_mask_storeu_ps(
      corr, kRows,
      _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m_old, m_new, _CMP_EQ_OQ), c, _mm512_set1_ps(1.0f)));
  _mm512_mask_storeu_ps(m, kRows, m_new);
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);
  for (int r = 0; r < MR; ++r) {
    const __m512 t = _mm512_set1_ps(top[r]);
    // The sums of what the products will use, the rounded probabilities, pair by pair into the
    // row's 16 lane sums (added up once, at the end of the item).
    float* lr = l + r * kLaneSums;
    __m512 sum = _mm512_mul_ps(_mm512_loadu_ps(lr), _mm512_set1_ps(corr[r]));
    for (int j = 0; j < kKeyVecs; j += 2) {
      const __m512 e0 = _mm512_maskz_mov_ps(vis[r][j], exp_softmax(_mm512_sub_ps(acc[r][j], t)));
      const __m512 e1 =
          _mm512_maskz_mov_ps(vis[r][j + 1], exp_softmax(_mm512_sub_ps(acc[r][j + 1], t)));
      const __m512bh b = _mm512_cvtne2ps_pbh(e1, e0);  // keys 16j.. from e0, 16(j+1).. from e1
      _mm512_storeu_si512(P + r * kChunk + 16 * j, (__m512i)b);
      sum = _mm512_dpbf16_ps(sum, b, ones);
    }
    _mm512_storeu_ps(lr, sum);
  }
}

// O[r, 16 * (j0 + j) ...] = O * corr[r] + sum over key pairs q of P[r, pair q] . vp[q][j0 + j]
// for MP rows and ND vectors of 16 dimensions (vp: [pairs][nvec]; P rows kPairs pairs apart).
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
      const __m512bh p = (__m512bh)_mm512_set1_epi32(static_cast<int>(P[r * kPairs + q]));
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
// [hd / 2][kKeyVecs] and then its values [kPairs][hd / 16], one __m512i each.
struct Bf16Products {
  static constexpr int MQ = 6, MP = 6, kChunk = detail::kChunk, kLaneSums = detail::kLaneSums;
  static constexpr size_t kPFloats = MQ * kChunk / 2;  // P: bf16 [MQ][kChunk]
  static size_t pack_floats(int hd) { return size_t(2) * kChunk * size_t(hd) / 2; }

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
      for (int j = 0; j < kKeyVecs; ++j)
        _mm512_store_si512(kp + kKeyVecs * p + j, pair_rows(kvec[j] + int64_t(2 * p) * seg,
                                                            kvec[j] + int64_t(2 * p + 1) * seg));
    __m512i* vp = kp + kKeyVecs * hd / 2;
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
    const auto* p = reinterpret_cast<const uint32_t*>(P) + pg * kPairs;
    table[mp - 1](O, hd, corr, p, reinterpret_cast<const __m512i*>(pack) + kKeyVecs * hd / 2,
                  (nv + 1) / 2);
  }
};

}  // namespace

void run_item_bf16_products(const AttnProblem& pb, const AttnItem& it) {
  simd::run_item<Vec512, uint16_t, Bf16Products>(pb, it);
}

}  // namespace mmrt::kernels::detail
