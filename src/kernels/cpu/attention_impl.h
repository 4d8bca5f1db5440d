// Internal: the work description shared by the attention planner (attention.cpp) and the
// per-ISA inner kernel (attention_kernel.h). Not a public header.
#pragma once

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cpu/cpu_backend.h"

namespace mmrt::kernels::detail {

// Keys are consumed in chunks of this many tokens: one online-softmax update per chunk.
constexpr int kAttnChunk = 32;

// Backend scratch slots: the planner's split-kv partials and packed K on the calling thread,
// each work item's buffers on whichever pool thread runs it.
constexpr int kPartOSlot = 0, kPartMlSlot = 1, kPackedKSlot = 2, kItemScratchSlot = 3;

// One sequence, normalised for the kernel (paged or contiguous source).
struct AttnSeqDesc {
  int32_t q_begin = 0, n_q = 0, kv_len = 0;
  const int32_t* block_table = nullptr;  // paged only
  MaskKind kind = MaskKind::kCausal;
  const KvSpan* spans = nullptr;
  int32_t n_spans = 0;
  int64_t kv_row0 = 0;      // contiguous: first row of this sequence in v
  int64_t k_pack_off = 0;   // contiguous: offset of this sequence's packed K (head 0)
  int64_t k_pack_head = 0;  // contiguous: elements between two heads' packed K
};

struct AttnProblem {
  const float* q = nullptr;  // [n_tokens, n_heads, head_dim], rows q_stride apart
  int64_t q_stride = 0;
  float* out = nullptr;  // [n_tokens, n_heads, head_dim], rows out_stride apart
  int64_t out_stride = 0;
  int32_t n_heads = 0, n_kv_heads = 0, head_dim = 0, group = 1;
  float scale = 1.0f;
  const AttnSeqDesc* seqs = nullptr;
  // Key/value source. Paged: k, v are the layer bases of a KvCache (see kv_cache.h), blocks of
  // `seg_len` tokens. Contiguous: k is a packed f32 K^T ([n_chunks, head_dim, seg_len] per
  // sequence and head, zero padded), v the caller's f32 rows, v_stride floats apart.
  bool paged = true;
  const void* k = nullptr;
  const void* v = nullptr;
  int32_t seg_len = 0;
  int64_t v_stride = 0;
  // Split-kv partial results: [rows, head_dim] outputs and [rows, 2] (max, sum) per slot row.
  float* part_o = nullptr;
  float* part_ml = nullptr;
  const CpuBackend* be = nullptr;  // per-thread item scratch
};

// Query tokens [tok_begin, tok_begin + n_tok) of one sequence and one kv head (all its query
// heads), over kv positions [kv_begin, kv_end) (kv_begin a multiple of kAttnChunk).
struct AttnItem {
  int32_t seq = 0, kv_head = 0, tok_begin = 0, n_tok = 0;
  int32_t kv_begin = 0, kv_end = 0;
  int64_t part_row = -1;  // -1: write normalised rows to out; else first row in part_o/part_ml
};

// lim[i] = number of leading keys that query token tok_begin + i of `s` sees (non-decreasing).
inline void attn_query_limits(const AttnSeqDesc& s, int32_t tok_begin, int32_t n, int32_t* lim) {
  query_key_limits(s.kind, {s.spans, static_cast<size_t>(s.n_spans)}, s.kv_len, s.n_q, tok_begin, n,
                   lim);
}

struct AttnFns {
  const char* isa;
  void (*run_f32)(const AttnProblem&, const AttnItem&);   // f32 keys/values
  void (*run_bf16)(const AttnProblem&, const AttnItem&);  // bf16 keys/values (paged only)
};

// An item over bf16 keys/values (paged) in bf16 products (PagedAttentionArgs::bf16): q (scaled)
// and the probabilities rounded to bf16, each chunk's keys and values repacked in pairs for
// vdpbf16ps, sums in f32 (attention_paged_avx512bf16.cpp; AVX512-BF16 only).
void run_item_bf16_products(const AttnProblem& pb, const AttnItem& it);

// Encoder attention as bf16 GEMMs (attention_gemm.cpp): false (nothing done) where it does not
// apply (VarlenAttentionArgs::bf16 unset, a causal mask, grouped heads, no AVX512-BF16).
bool varlen_attention_gemm(const CpuBackend& be, const VarlenAttentionArgs& a);
// Whether varlen_attention_gemm computes VarlenAttentionArgs::int8_scores on this backend
// (AVX512-BF16 and AVX512-VNNI).
bool varlen_int8_scores_here(const CpuBackend& be);
// Rows [rows, lenp] of scores: P = bf16(exp(s - max)) over the first len, zeros to lenp (a
// multiple of 16); sums = the rows' sums of the rounded P. AVX512-BF16 only.
void softmax_rows_bf16(const float* s, int rows, int len, int lenp, uint16_t* p, float* sums);
// dst [rows_pad, hd_pad] = bf16(src row * scale) for the first `rows` rows (src rows src_stride
// apart, hd values each), zeros after them and past hd, rounded as softmax_rows_bf16 rounds P.
// hd_pad: a multiple of 16, >= hd. AVX512-BF16 only.
void scale_rows_bf16(const float* src, int64_t src_stride, int rows, int rows_pad, int hd,
                     int hd_pad, float scale, uint16_t* dst);
// dst row r (dst_stride apart) = o [rows, hd] row r / sums[r] (zero where the sum is 0).
void normalize_rows(const float* o, const float* sums, int rows, int hd, float* dst,
                    int64_t dst_stride);

// One head's keys of one segment for VarlenAttentionArgs::int8_scores (AVX512-VNNI): q in
// blocks of 16 keys, [lenp / 16][hd / 4][16][4] int8 (four dims of a key side by side, as
// vpdpbusd reads them; a block's hd * 16 bytes contiguous), the keys' scales and offsets
// (128 x the key's sum of q) [lenp]; lenp a multiple of 64, padding keys zero.
struct Int8Keys {
  int8_t* q = nullptr;
  float* scale = nullptr;
  int32_t* offset = nullptr;
  int64_t lenp = 0;
};
// One head's query rows: q [rows, hd] as u8 (q8 + 128), scale [rows] (times the softmax's).
struct Int8Queries {
  uint8_t* q = nullptr;
  float* scale = nullptr;
};
// Key row t of every head h into dst[h]: key - mean (both [heads * hd] f32) quantised per head
// as LinearKernels::quantize_rows_q8 quantises a row (hd a multiple of 16, <= 512).
void pack_key_int8(const float* key, const float* mean, int heads, int hd, int64_t t,
                   const Int8Keys* dst);
// Query row t of every head h into dst[h], quantised by the same rule; its scale is stored
// times `softmax_scale`.
void pack_query_int8(const float* row, int heads, int hd, int64_t t, float softmax_scale,
                     const Int8Queries* dst);
// s [rows, k.lenp] = (q . K^T - offsets) * qs[r] * k.scale[j]: q [rows, hd] u8 (q8 + 128), its
// scales qs [rows] (the softmax scale folded in).
void scores_int8(const uint8_t* q, const float* qs, int rows, int hd, const Int8Keys& k, float* s);

const AttnFns& attn_fns_scalar();
const AttnFns& attn_fns_avx2();
const AttnFns& attn_fns_avx512();

}  // namespace mmrt::kernels::detail
