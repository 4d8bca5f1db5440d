// Attention front end: argument validation, work planning (sequence x kv head x query tile,
// optional kv splits for long decodes), key packing for the contiguous variant, split-kv
// merging and run-time ISA selection of the inner kernel (attention_kernel.h).
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/attention_kernel.h"

namespace mmrt::kernels {

namespace detail {

const AttnFns& attn_fns_scalar() {
  static const AttnFns f = simd::make_attn_fns<simd::VecScalar>("scalar");
  return f;
}

}  // namespace detail

namespace {

using detail::AttnItem;
using detail::AttnProblem;
using detail::AttnSeqDesc;
using detail::kAttnChunk;

const detail::AttnFns& attn_fns(Isa cap) {
  static const IsaVariants<detail::AttnFns> v{{Isa::kAvx512, detail::attn_fns_avx512},
                                              {Isa::kAvx2, detail::attn_fns_avx2},
                                              {Isa::kPortable, detail::attn_fns_scalar}};
  return v.at_most(cap);
}

constexpr int kRowsPerTile = 36;  // query rows (tokens x group) per work item in prefill
// ... in bf16 products: more rows per repacked key chunk (measured 3-8 % faster than 36 on one
// Zen 5 core, 512 queries over 4,608 keys)
constexpr int kRowsPerTileBf16 = 72;
constexpr int32_t kMinSplitKv = 512;  // automatic splits keep at least this many keys per part

// Plans the work items, runs them, merges split-kv partials.
// bf16: the keys/values are bf16; bf16_products: prefill rows (n_q > 1) in bf16 products, or
// every row when the backend is batch invariant (a row's result does not depend on its tile).
void run_problem(const CpuBackend& be, AttnProblem& pb, const std::vector<AttnSeqDesc>& seqs,
                 int32_t kv_splits, bool bf16, bool bf16_products = false) {
  ThreadPool& pool = be.pool();
  pb.be = &be;
  const int G = pb.group;
  pb.seqs = seqs.data();

  struct Tile {
    int32_t seq, tok_begin, n_tok, visible;  // visible: keys seen by the tile's last token
  };
  // Planning buffers: small, one set per call (a few allocations per layer and step); the large
  // split-kv partials come from the backend's scratch.
  std::vector<Tile> tiles;
  int32_t lim_last[1];
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttnSeqDesc& s = seqs[i];
    if (s.n_q == 0) continue;
    const int32_t tq =
        s.n_q == 1 ? 1 : std::max(1, (bf16_products ? kRowsPerTileBf16 : kRowsPerTile) / G);
    for (int32_t t = 0; t < s.n_q; t += tq) {
      const int32_t n = std::min(tq, s.n_q - t);
      detail::attn_query_limits(s, t + n - 1, 1, lim_last);
      tiles.push_back({static_cast<int32_t>(i), t, n, lim_last[0]});
    }
  }
  if (tiles.empty()) return;
  const int64_t base_items = static_cast<int64_t>(tiles.size()) * pb.n_kv_heads;

  // Split each tile's kv range when the tiles alone cannot keep the threads busy (long decodes).
  int32_t max_parts = 1, min_part = kMinSplitKv;
  if (kv_splits > 0) {
    max_parts = kv_splits;
    min_part = kAttnChunk;
  } else if (base_items < pool.size()) {
    max_parts = static_cast<int32_t>((2 * pool.size() + base_items - 1) / base_items);
  }

  std::vector<AttnItem> items;
  struct Merge {
    int32_t seq, kv_head, tok_begin, n_tok, n_parts;
    int64_t part_row;  // first partial row; parts follow each other, rows = n_tok * G each
  };
  std::vector<Merge> merges;
  int64_t part_rows = 0;
  for (const Tile& t : tiles) {
    const int32_t n_chunks = (t.visible + kAttnChunk - 1) / kAttnChunk;
    const int32_t parts = std::clamp<int32_t>(std::min(max_parts, t.visible / min_part), 1,
                                              std::max<int32_t>(n_chunks, 1));
    for (int32_t h = 0; h < pb.n_kv_heads; ++h) {
      if (parts == 1) {
        items.push_back({t.seq, h, t.tok_begin, t.n_tok, 0, t.visible, -1});
        continue;
      }
      const int64_t rows = int64_t(t.n_tok) * G;
      merges.push_back({t.seq, h, t.tok_begin, t.n_tok, parts, part_rows});
      for (int32_t p = 0; p < parts; ++p) {
        const int32_t c0 = int32_t(int64_t(n_chunks) * p / parts);
        const int32_t c1 = int32_t(int64_t(n_chunks) * (p + 1) / parts);
        items.push_back({t.seq, h, t.tok_begin, t.n_tok, c0 * kAttnChunk,
                         std::min(t.visible, c1 * kAttnChunk), part_rows + p * rows});
      }
      part_rows += parts * rows;
    }
  }
  pb.part_o = static_cast<float*>(be.scratch(  // [part_rows, hd]
      detail::kPartOSlot, static_cast<size_t>(part_rows) * pb.head_dim * sizeof(float)));
  pb.part_ml = static_cast<float*>(be.scratch(  // [part_rows, 2]
      detail::kPartMlSlot, static_cast<size_t>(part_rows) * 2 * sizeof(float)));

  // Most expensive first, so the dynamic schedule ends with small items (order never changes
  // results: items are independent).
  std::sort(items.begin(), items.end(), [](const AttnItem& a, const AttnItem& b) {
    return int64_t(a.n_tok) * (a.kv_end - a.kv_begin) > int64_t(b.n_tok) * (b.kv_end - b.kv_begin);
  });
  const detail::AttnFns& fns = attn_fns(be.isa());
  auto run = bf16 ? fns.run_bf16 : fns.run_f32;
  pool.parallel_for(static_cast<int64_t>(items.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const AttnItem& it = items[static_cast<size_t>(i)];
      if (bf16_products && (seqs[static_cast<size_t>(it.seq)].n_q > 1 || be.batch_invariant()))
        detail::run_item_bf16_products(pb, it);
      else
        run(pb, it);
    }
  });

  // Merge partials: out = sum_p O_p e^(m_p - M) / sum_p l_p e^(m_p - M).
  const int hd = pb.head_dim;
  pool.parallel_for(static_cast<int64_t>(merges.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t mi = b; mi < e; ++mi) {
      const Merge& mg = merges[static_cast<size_t>(mi)];
      const AttnSeqDesc& s = seqs[static_cast<size_t>(mg.seq)];
      const int64_t rows = int64_t(mg.n_tok) * G;
      for (int64_t r = 0; r < rows; ++r) {
        float M = -std::numeric_limits<float>::infinity();
        for (int32_t p = 0; p < mg.n_parts; ++p)
          M = std::max(M, pb.part_ml[size_t((mg.part_row + p * rows + r) * 2)]);
        const int64_t tok = mg.tok_begin + r / G, qh = int64_t(mg.kv_head) * G + r % G;
        float* dst = pb.out + (s.q_begin + tok) * pb.out_stride + qh * hd;  // [hd]
        std::fill(dst, dst + hd, 0.0f);
        float L = 0.0f;
        for (int32_t p = 0; p < mg.n_parts; ++p) {
          const int64_t pr = mg.part_row + p * rows + r;
          const float lp = pb.part_ml[size_t(pr * 2 + 1)];
          if (lp == 0.0f) continue;  // this part saw no key of the row
          const float w = std::exp(pb.part_ml[size_t(pr * 2)] - M);
          L += lp * w;
          const float* src = pb.part_o + pr * hd;
          for (int d = 0; d < hd; ++d) dst[d] += src[d] * w;
        }
        const float inv = L > 0.0f ? 1.0f / L : 0.0f;
        for (int d = 0; d < hd; ++d) dst[d] *= inv;
      }
    }
  });
}

}  // namespace

namespace cpu {

void paged_attention(const CpuBackend& be, const PagedAttentionArgs& a, const KvLayerView& kv,
                     std::span<const AttnSeq> seqs) {
  const int32_t hd = kv.head_dim, hk = kv.n_kv_heads, bs = kv.block_size;
  const int64_t q_stride = a.q_stride, out_stride = a.out_stride;  // resolved by the dispatcher

  std::vector<AttnSeqDesc> desc;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttnSeq& s = seqs[i];
    if (s.n_q == 0) continue;
    AttnSeqDesc d;
    d.q_begin = s.q_begin;
    d.n_q = s.n_q;
    d.kv_len = s.kv_len;
    d.block_table = s.block_table;
    d.kind = s.mask.kind;
    d.spans = s.mask.bidirectional.data();
    d.n_spans = static_cast<int32_t>(s.mask.bidirectional.size());
    desc.push_back(d);
  }
  AttnProblem pb;
  pb.q = a.q;
  pb.q_stride = q_stride;
  pb.out = a.out;
  pb.out_stride = out_stride;
  pb.n_heads = a.n_heads;
  pb.n_kv_heads = hk;
  pb.head_dim = hd;
  pb.group = a.n_heads / hk;
  pb.scale = a.scale;
  pb.paged = true;
  pb.k = kv.k;
  pb.v = kv.v;
  pb.seg_len = bs;
  // Batch invariance: no split-kv (how many parts a range is split into follows the batch),
  // and a prefill row computed as its decode would be (bf16 products for both).
  const bool bf16 = kv.dtype == DType::kBF16;
  // The backend's variant is never above what the CPU has: kAvx512Bf16 means AVX512-BF16.
  const bool products = a.bf16 && bf16 && be.isa() == Isa::kAvx512Bf16;
  run_problem(be, pb, desc, be.batch_invariant() ? 1 : a.kv_splits, bf16, products);
}

bool varlen_int8_scores(const CpuBackend& be) {
  return detail::varlen_int8_scores_here(be);
}

void varlen_attention(const CpuBackend& be, const VarlenAttentionArgs& a) {
  const int32_t hd = a.head_dim, hk = a.n_kv_heads;
  // Strides and scale resolved by the dispatcher.
  const int64_t q_stride = a.q_stride, out_stride = a.out_stride;
  const int64_t k_stride = a.k_stride, v_stride = a.v_stride;
  if (detail::varlen_attention_gemm(be, a)) return;

  // Pack K transposed per (segment, kv head): [n_chunks, hd, kAttnChunk], zero padded.
  const size_t n_seqs = a.cu_seqlens.size() - 1;
  std::vector<AttnSeqDesc> desc(n_seqs);
  int64_t packed = 0;
  for (size_t i = 0; i < n_seqs; ++i) {
    AttnSeqDesc& d = desc[i];
    const int32_t len = a.cu_seqlens[i + 1] - a.cu_seqlens[i];
    d.q_begin = a.cu_seqlens[i];
    d.n_q = len;
    d.kv_len = len;
    d.kind = a.mask;
    d.kv_row0 = a.cu_seqlens[i];
    d.k_pack_head = int64_t((len + kAttnChunk - 1) / kAttnChunk) * hd * kAttnChunk;
    d.k_pack_off = packed;
    packed += d.k_pack_head * hk;
  }
  // Packed K^T of every segment and head.
  float* kt = static_cast<float*>(
      be.scratch(detail::kPackedKSlot, static_cast<size_t>(packed) * sizeof(float)));
  ThreadPool& tp = be.pool();
  tp.parallel_for(static_cast<int64_t>(n_seqs) * hk, 1, [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      const AttnSeqDesc& d = desc[static_cast<size_t>(w / hk)];
      const int64_t h = w % hk;
      float* dst = kt + d.k_pack_off + h * d.k_pack_head;
      std::fill(dst, dst + d.k_pack_head, 0.0f);
      for (int32_t t = 0; t < d.kv_len; ++t) {
        const float* src = a.k + (d.kv_row0 + t) * k_stride + h * hd;  // [hd]
        float* col = dst + int64_t(t / kAttnChunk) * hd * kAttnChunk + t % kAttnChunk;
        for (int32_t x = 0; x < hd; ++x) col[int64_t(x) * kAttnChunk] = src[x];
      }
    }
  });
  AttnProblem pb;
  pb.q = a.q;
  pb.q_stride = q_stride;
  pb.out = a.out;
  pb.out_stride = out_stride;
  pb.n_heads = a.n_heads;
  pb.n_kv_heads = hk;
  pb.head_dim = hd;
  pb.group = a.n_heads / hk;
  pb.scale = a.scale;
  pb.paged = false;
  pb.k = kt;
  pb.v = a.v;
  pb.seg_len = kAttnChunk;
  pb.v_stride = v_stride;
  run_problem(be, pb, desc, a.kv_splits, /*bf16=*/false);
}

}  // namespace cpu

const char* attention_isa(Isa cap) {
  return attn_fns(cap).isa;
}

}  // namespace mmrt::kernels
