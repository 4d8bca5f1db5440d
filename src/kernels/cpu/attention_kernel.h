// Internal: the attention inner kernel, written once against the ops_simd.h wrappers and
// instantiated per ISA (attention.cpp / attention_avx2.cpp / attention_avx512.cpp).
//
// One work item = the query rows of (sequence, kv head, query tile): R = n_tok * group rows,
// row = token * group + head-in-group. Keys are taken 32 at a time (a "chunk", possibly spanning
// two 16-token blocks); for each chunk:
//   S = Q_rows . K_chunk^T   (K is stored transposed, so 16 keys form one vector and every query
//                             element is a broadcast: a small GEMM with no horizontal sums)
//   online softmax per row:  m' = max(m, max S), c = exp(m - m'), P = exp(S - m'),
//                            l = l * c + sum P
//   O_rows = O_rows * c + P . V_chunk
// and finally out = O / l (or O, m, l kept as a partial result when the kv range is split).
// The products are a policy (ExactProducts here; Bf16Products in attention_paged_avx512bf16.cpp,
// which takes 64 keys a chunk and repacks them).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/ops_simd.h"

namespace mmrt::kernels::simd {
namespace {

using detail::AttnItem;
using detail::AttnProblem;
using detail::AttnSeqDesc;
using detail::kAttnChunk;

template <class V>
struct AttnTile {
  static constexpr int W = V::W;
  static constexpr int NT = kAttnChunk / W;                 // vectors per key chunk
  static constexpr int MQ = W == 16 ? 12 : W == 8 ? 3 : 4;  // rows per score tile
  static constexpr int MP = W == 16 ? 6 : W == 8 ? 3 : 2;   // rows per P.V tile
  static constexpr int ND = W == 16 ? 4 : W == 8 ? 3 : 16;  // head_dim vectors per P.V tile
};

// Per-thread scratch, grown on demand and reused (no allocation in steady state).
// One work item's buffers, carved from the running pool thread's backend scratch (slot
// kItemScratchSlot, 64-byte aligned): pack [pack_floats] (a products policy's repacked key
// chunk, see Bf16Products; a multiple of 16), q, o [rows, hd]; l [rows, lane_sums] (a row's
// probability sum as lane_sums partial sums); m, corr [rows]; p [p_floats]; lim [n_tok].
struct AttnScratch {
  float *pack, *q, *o, *m, *l, *corr, *p;
  int32_t* lim;
  AttnScratch(const CpuBackend& be, int rows, int hd, int n_tok, int lane_sums, size_t pack_floats,
              size_t p_floats) {
    const size_t rh = static_cast<size_t>(rows) * hd, r = static_cast<size_t>(rows);
    const size_t floats =
        pack_floats + 2 * rh + (2 + static_cast<size_t>(lane_sums)) * r + p_floats;
    pack = static_cast<float*>(be.scratch(detail::kItemScratchSlot, (floats + n_tok) * 4));
    q = pack + pack_floats;
    o = q + rh;
    l = o + rh;
    m = l + r * static_cast<size_t>(lane_sums);
    corr = m + r;
    p = corr + r;
    lim = reinterpret_cast<int32_t*>(p + p_floats);
  }
};

// S for MR rows x one key chunk, then the online-softmax update of those rows.
// Q: [MR, hd] (pre-scaled); kvec[j]: K^T column block of key vector j (d stride `dstride`);
// hi[r]: keys of the chunk row r may see; P: [MR, kAttnChunk] out.
template <class V, class T, int MR>
void qk_softmax(const float* Q, int hd, const T* const* kvec, int64_t dstride, const int* hi,
                float* m, float* l, float* corr, float* P) {
  constexpr int NT = AttnTile<V>::NT, W = V::W;
  using R = typename V::R;
  R acc[MR][NT];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NT; ++j) acc[r][j] = V::set1(0.0f);
  for (int d = 0; d < hd; ++d) {
    R kv[NT];
    for (int j = 0; j < NT; ++j) kv[j] = V::load(kvec[j] + d * dstride);
    for (int r = 0; r < MR; ++r) {
      R qv = V::set1(Q[r * hd + d]);
      for (int j = 0; j < NT; ++j) acc[r][j] = V::fma(qv, kv[j], acc[r][j]);
    }
  }
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int r = 0; r < MR; ++r) {
    R mx = V::keep_first(acc[r][0], hi[r], kNegInf);
    acc[r][0] = mx;
    for (int j = 1; j < NT; ++j) {
      acc[r][j] = V::keep_first(acc[r][j], hi[r] - j * W, kNegInf);
      mx = V::max(acc[r][j], mx);
    }
    const float m_new = std::max(m[r], V::hmax(mx));  // finite: lane 0 is always visible
    corr[r] = std::exp(m[r] - m_new);                 // 0 on the first chunk (m = -inf)
    R mv = V::set1(m_new), sum = V::set1(0.0f);
    for (int j = 0; j < NT; ++j) {
      R e = V::exp(V::sub(acc[r][j], mv));  // masked lanes: exp(-inf) = 0
      V::store(P + r * kAttnChunk + j * W, e);
      sum = V::add(sum, e);
    }
    l[r] = l[r] * corr[r] + V::hsum(sum);
    m[r] = m_new;
  }
}

// O[r, dv0 : dv0 + ND*W] = O * corr[r] + sum_t P[r, t] * V[t, dv0 : ...] for MP rows.
template <class V, class T, int MP, int ND>
void pv_tile(float* O, int hd, int dv0, const float* corr, const float* P, const T* const* vrow,
             int nv) {
  constexpr int W = V::W;
  using R = typename V::R;
  R acc[MP][ND];
  for (int r = 0; r < MP; ++r) {
    R c = V::set1(corr[r]);
    for (int j = 0; j < ND; ++j) acc[r][j] = V::mul(V::load(O + r * hd + dv0 + j * W), c);
  }
  for (int t = 0; t < nv; ++t) {
    R vv[ND];
    for (int j = 0; j < ND; ++j) vv[j] = V::load(vrow[t] + dv0 + j * W);
    for (int r = 0; r < MP; ++r) {
      R p = V::set1(P[r * kAttnChunk + t]);
      for (int j = 0; j < ND; ++j) acc[r][j] = V::fma(p, vv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < MP; ++r)
    for (int j = 0; j < ND; ++j) V::store(O + r * hd + dv0 + j * W, acc[r][j]);
}

// Function tables over a template size parameter (tile rows or vectors 1..N).
template <class V, class T, int MP, int... I>
constexpr auto pv_tile_table(std::integer_sequence<int, I...>) {
  return std::array{&pv_tile<V, T, MP, I + 1>...};
}

template <class V, class T, int MP>
void pv_rows(float* O, int hd, const float* corr, const float* P, const T* const* vrow, int nv) {
  constexpr int W = V::W, ND = AttnTile<V>::ND;
  const int nvec = hd / W;
  int j = 0;
  for (; j + ND <= nvec; j += ND) pv_tile<V, T, MP, ND>(O, hd, j * W, corr, P, vrow, nv);
  const int rem = nvec - j;  // 0 .. ND-1
  constexpr auto table = pv_tile_table<V, T, MP>(std::make_integer_sequence<int, ND - 1>{});
  if (rem > 0) table[rem - 1](O, hd, j * W, corr, P, vrow, nv);
}

template <class V, class T, int... I>
constexpr auto qk_table_of(std::integer_sequence<int, I...>) {
  return std::array{&qk_softmax<V, T, I + 1>...};
}

template <class V, class T, int... I>
constexpr auto pv_rows_table(std::integer_sequence<int, I...>) {
  return std::array{&pv_rows<V, T, I + 1>...};
}

// The products of the exact kernel: f32 q, f32 sums of f32 (or widened bf16) keys and values.
template <class V, class T>
struct ExactProducts {
  static constexpr int MQ = AttnTile<V>::MQ, MP = AttnTile<V>::MP;
  static constexpr int kLaneSums = 1;        // floats a row's probability sum is kept in (l)
  static constexpr int kChunk = kAttnChunk;  // keys per online-softmax update
  static constexpr size_t kPFloats = 16 * kAttnChunk;  // P's scratch
  static size_t pack_floats(int) { return 0; }
  // Row r of the query buffer from one head's query (hd floats), pre-scaled.
  static void load_q(const float* src, float scale, int hd, float* Q, int r) {
    float* dst = Q + int64_t(r) * hd;
    for (int d = 0; d < hd; ++d) dst[d] = src[d] * scale;
  }
  // Nothing to repack: the products read the cache's rows where they are.
  static void pack_chunk(const T* const*, const T* const*, int, int, int32_t, float*) {}
  // S and the online-softmax update of query rows [rg, rg + mr) (P: their probabilities).
  static void qk(int mr, const float* Q, int rg, int hd, const T* const* kvec, int32_t seg,
                 const float*, const int* hi, float* m, float* l, float* corr, float* P) {
    constexpr auto table = qk_table_of<V, T>(std::make_integer_sequence<int, AttnTile<V>::MQ>{});
    table[mr - 1](Q + int64_t(rg) * hd, hd, kvec, seg, hi, m, l, corr, P);
  }
  // O rows += their probabilities' rows [pg, pg + mp) of P times the chunk's first nv values.
  static void pv(int mp, float* O, int hd, const float* corr, const float* P, int pg,
                 const T* const* vrow, const float*, int nv) {
    constexpr auto table = pv_rows_table<V, T>(std::make_integer_sequence<int, AttnTile<V>::MP>{});
    table[mp - 1](O, hd, corr, P + pg * kAttnChunk, vrow, nv);
  }
};

// One work item, its products computed by M (ExactProducts, or Bf16Products on AVX512-BF16).
template <class V, class T, class M = ExactProducts<V, T>>
void run_item(const AttnProblem& pb, const AttnItem& it) {
  constexpr int W = V::W, C = M::kChunk, NT = C / W, MQ = M::MQ, MP = M::MP;
  const AttnSeqDesc& s = pb.seqs[it.seq];
  const int G = pb.group, hd = pb.head_dim, n_tok = it.n_tok, rows = n_tok * G;
  constexpr int LS = M::kLaneSums;
  const AttnScratch sc(*pb.be, rows, hd, n_tok, LS, M::pack_floats(hd), M::kPFloats);
  float* Q = sc.q;        // [rows, hd], pre-scaled (M's layout)
  float* O = sc.o;        // [rows, hd]
  float* m = sc.m;        // [rows]
  float* l = sc.l;        // [rows, LS]
  float* corr = sc.corr;  // [rows]
  float* P = sc.p;        // the probabilities of MQ rows for a chunk (M's layout)
  int32_t* lim = sc.lim;  // [n_tok]

  for (int t = 0; t < n_tok; ++t) {
    const float* qt = pb.q + int64_t(s.q_begin + it.tok_begin + t) * pb.q_stride;
    for (int g = 0; g < G; ++g)
      M::load_q(qt + int64_t(it.kv_head * G + g) * hd, pb.scale, hd, Q, t * G + g);
  }
  for (int64_t i = 0; i < int64_t(rows) * hd; ++i) O[i] = 0.0f;
  for (int r = 0; r < rows; ++r) m[r] = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < rows * LS; ++i) l[i] = 0.0f;
  detail::attn_query_limits(s, it.tok_begin, n_tok, lim);
  const int32_t kv_end = std::min(it.kv_end, lim[n_tok - 1]);

  // Key source for this (sequence, kv head): runs of seg_len tokens, K^T [hd, seg_len] and
  // V [seg_len, hd] per run; paged runs are found through the block table.
  const T* kbase;
  const T* vbase;
  int64_t k_run, v_run, v_tok;
  const int32_t seg = pb.seg_len;
  if (pb.paged) {
    kbase = static_cast<const T*>(pb.k) + int64_t(it.kv_head) * hd * seg;
    vbase = static_cast<const T*>(pb.v) + int64_t(it.kv_head) * seg * hd;
    k_run = v_run = int64_t(pb.n_kv_heads) * hd * seg;
    v_tok = hd;
  } else {
    kbase = static_cast<const T*>(pb.k) + s.k_pack_off + it.kv_head * s.k_pack_head;
    vbase = static_cast<const T*>(pb.v) + s.kv_row0 * pb.v_stride + int64_t(it.kv_head) * hd;
    k_run = int64_t(hd) * seg;
    v_run = int64_t(seg) * pb.v_stride;
    v_tok = pb.v_stride;
  }
  auto run_index = [&](int32_t r) -> int64_t { return pb.paged ? s.block_table[r] : r; };

  // Software prefetch of the next chunk's runs: paged blocks sit at unrelated addresses, so the
  // hardware prefetchers cannot run ahead across them (decode streams K/V from DRAM).
  auto prefetch_run = [&](int32_t r) {
    const char* kp = reinterpret_cast<const char*>(kbase + run_index(r) * k_run);
    const int64_t bytes = int64_t(hd) * seg * int64_t(sizeof(T));
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(kp + b, 0, 3);
    if (!pb.paged) return;  // contiguous V rows are a regular stride the hardware follows
    const char* vp = reinterpret_cast<const char*>(vbase + run_index(r) * v_run);
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(vp + b, 0, 3);
  };
  int32_t prefetched = (std::min(it.kv_begin + C, kv_end) - 1) / seg;

  const T* kvec[NT];
  const T* vrow[C];
  int hi[MQ];
  int tok0 = 0;
  for (int32_t t0 = it.kv_begin; t0 < kv_end; t0 += C) {
    const int nvalid = std::min<int32_t>(C, kv_end - t0);
    if (t0 + C < kv_end) {
      const int32_t last = (std::min(t0 + 2 * C, kv_end) - 1) / seg;
      while (prefetched < last) prefetch_run(++prefetched);
    }
    while (lim[tok0] <= t0) ++tok0;  // tokens [tok0, n_tok) see part of this chunk
    // Walk the chunk's tokens run by run (one division per chunk; W divides seg_len).
    int32_t run = t0 / seg, off = t0 % seg;
    const T* kr = kbase + run_index(run) * k_run;
    const T* vr = vbase + run_index(run) * v_run;
    for (int t = 0; t < nvalid; ++t, ++off) {
      if (off == seg) {
        ++run;
        off = 0;
        kr = kbase + run_index(run) * k_run;
        vr = vbase + run_index(run) * v_run;
      }
      if (t % W == 0) kvec[t / W] = kr + off;
      vrow[t] = vr + off * v_tok;
    }
    for (int j = (nvalid + W - 1) / W; j < NT; ++j) kvec[j] = kvec[0];  // past the end: masked
    M::pack_chunk(kvec, vrow, nvalid, hd, seg, sc.pack);
    for (int rg = tok0 * G; rg < rows; rg += MQ) {
      const int mr = std::min(MQ, rows - rg);
      for (int r = 0; r < mr; ++r) hi[r] = std::min(lim[(rg + r) / G], kv_end) - t0;
      M::qk(mr, Q, rg, hd, kvec, seg, sc.pack, hi, m + rg, l + rg * LS, corr + rg, P);
      for (int pg = 0; pg < mr; pg += MP) {
        const int mp = std::min(MP, mr - pg);
        const int nv = std::min(nvalid, hi[pg + mp - 1]);
        M::pv(mp, O + int64_t(rg + pg) * hd, hd, corr + rg + pg, P, pg, vrow, sc.pack, nv);
      }
    }
  }

  if (LS > 1) {  // each row's partial sums added up, into its first
    for (int r = 0; r < rows; ++r) {
      float sum = 0.0f;
      for (int i = 0; i < LS; ++i) sum += l[r * LS + i];
      l[r] = sum;
    }
  }
  if (it.part_row < 0) {
    for (int t = 0; t < n_tok; ++t) {
      float* ot = pb.out + int64_t(s.q_begin + it.tok_begin + t) * pb.out_stride;
      for (int g = 0; g < G; ++g) {
        const int r = t * G + g;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        float* dst = ot + int64_t(it.kv_head * G + g) * hd;  // [hd]
        const float* src = O + int64_t(r) * hd;
        int d = 0;
        for (; d + W <= hd; d += W) V::store(dst + d, V::mul(V::load(src + d), V::set1(inv)));
        for (; d < hd; ++d) dst[d] = src[d] * inv;
      }
    }
  } else {
    for (int r = 0; r < rows; ++r) {
      float* dst = pb.part_o + (it.part_row + r) * hd;
      for (int d = 0; d < hd; ++d) dst[d] = O[int64_t(r) * hd + d];
      pb.part_ml[(it.part_row + r) * 2] = m[r];
      pb.part_ml[(it.part_row + r) * 2 + 1] = l[r];
    }
  }
}

template <class V>
detail::AttnFns make_attn_fns(const char* isa) {
  return detail::AttnFns{isa, &run_item<V, float>, &run_item<V, uint16_t>};
}

}  // namespace
}  // namespace mmrt::kernels::simd
