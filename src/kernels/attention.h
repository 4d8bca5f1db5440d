// Scaled dot-product attention (an op family: AttentionOps). The CPU backend's: flash-attention
// style online softmax (running max and sum in fp32, never a full score matrix), grouped-query
// heads (query head i reads kv head i / (n_heads / n_kv_heads); each K/V tile is loaded once for
// the whole group), masks given as small descriptors (no dense mask tensors; no O(n_q * kv_len)
// memory anywhere).
//
// paged_attention: one call serves a batch of sequences of different lengths, each in prefill
// (many query rows, possibly a chunk that starts mid-sequence) or decode (one query row).
// varlen_attention: contiguous q/k/v with cu_seqlens segments (vision tower), same inner kernel.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/backend.h"
#include "kernels/kv_cache.h"

namespace mmrt::kernels {

// A run of kv positions [begin, end).
struct KvSpan {
  int32_t begin = 0, end = 0;
};

enum class MaskKind : uint8_t {
  kCausal,  // query i (at kv position kv_len - n_q + i) sees kv [0, position]
  kFull,    // every query sees every key of its sequence (bidirectional)
};

// Which keys each query of a sequence sees. With kCausal, a query whose position lies inside a
// bidirectional span also sees every key of that span (e.g. the image tokens of some models).
// Spans must be sorted, disjoint and non-empty. Keys at positions >= kv_len are never seen, so
// a span should be complete in the cache before any of its queries is computed.
struct MaskDesc {
  MaskKind kind = MaskKind::kCausal;
  std::span<const KvSpan> bidirectional = {};
};

// One sequence of a paged_attention batch.
struct AttnSeq {
  int32_t q_begin = 0;  // first row of q / out
  int32_t n_q = 0;      // query rows (the newest n_q tokens of the sequence)
  int32_t kv_len = 0;   // tokens in the cache for this sequence, including the new ones
  const int32_t* block_table = nullptr;  // [ceil(kv_len / block_size)] physical block ids
  MaskDesc mask = {};
};

struct PagedAttentionArgs {
  const float* q = nullptr;  // [n_tokens, n_heads, head_dim], token rows q_stride floats apart
  int64_t q_stride = 0;      // 0: n_heads * head_dim
  float* out = nullptr;      // [n_tokens, n_heads, head_dim], rows out_stride floats apart
  int64_t out_stride = 0;    // 0: n_heads * head_dim
  int64_t n_tokens = 0;      // rows available in q / out (bounds every q_begin + n_q)
  int32_t n_heads = 0;       // a multiple of the cache's n_kv_heads
  float scale = 0.0f;        // 0: head_dim^-0.5
  int32_t kv_splits = 0;     // 0: automatic; n > 0: split each kv range into up to n parts
  // With a bf16 cache, the backend may round the prefill rows' q (scaled) and probabilities to
  // bf16 and sum their products in f32 (the CPU: sequences with n_q > 1, AVX512-BF16; ~2x the
  // f32 products). Decode rows keep the exact kernel, but under
  // BackendOptions::batch_invariant, where every row takes the bf16 products (a prefill row
  // must equal its decode). The 16-bit models ask for it; f32 models and caches keep the exact
  // kernel.
  bool bf16 = false;
};

// Attention of every sequence's query rows over its cached keys/values. The sequences' q rows
// must not overlap. Throws InvalidArgument on inconsistent arguments (bad block ids included).
void paged_attention(const Backend& be, const PagedAttentionArgs& args, const KvLayerView& kv,
                     std::span<const AttnSeq> seqs);

struct VarlenAttentionArgs {
  const float* q = nullptr;  // [n_tokens, n_heads, head_dim], rows q_stride floats apart
  const float* k = nullptr;  // [n_tokens, n_kv_heads, head_dim], rows k_stride floats apart
  const float* v = nullptr;  // [n_tokens, n_kv_heads, head_dim], rows v_stride floats apart
  float* out = nullptr;      // [n_tokens, n_heads, head_dim], rows out_stride floats apart
  int64_t q_stride = 0, k_stride = 0, v_stride = 0, out_stride = 0;  // 0: packed rows
  std::span<const int32_t> cu_seqlens = {};  // [n_seqs + 1]: 0 = c0 <= c1 <= ... = n_tokens
  int32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;  // head_dim: a multiple of 16
  MaskKind mask = MaskKind::kFull;                    // kFull: bidirectional within each segment
  float scale = 0.0f;                                 // 0: head_dim^-0.5
  int32_t kv_splits = 0;                              // as in PagedAttentionArgs
  // The backend may round q (scaled), k, the probabilities and v to bf16 and sum the products
  // in f32 (the CPU: kFull masks, n_heads == n_kv_heads, AVX512-BF16; ~2x the f32 kernel). The
  // 16-bit encoders ask for it; f32 models keep the exact kernel.
  bool bf16 = false;
  // The scores from int8 q and k, for the int8 encoder blocks: per query row and head q is
  // quantised as the int8 linears quantise x (scale = max|q| / 127, round half to even), each
  // key's head likewise after the segment's mean key is subtracted from it (per head and dim:
  // the softmax cannot see it, and the keys' common offset no longer eats their int8 range),
  // the integer products summed exactly and scaled by both scales and `scale`; P and v then in
  // bf16 as under `bf16` (whatever it says). Only where varlen_int8_scores_supported(be) (the
  // CPU: AVX512-VNNI and AVX512-BF16 without AMX, whose bf16 tiles are faster; kFull masks,
  // n_heads == n_kv_heads); elsewhere Unimplemented.
  bool int8_scores = false;
};

// Attention within each segment [cu_seqlens[i], cu_seqlens[i+1]) of contiguous q/k/v; e.g. the
// vision tower (q, k, v are views into one fused qkv buffer through the strides).
void varlen_attention(const Backend& be, const VarlenAttentionArgs& args);
// Whether this backend computes VarlenAttentionArgs::int8_scores.
bool varlen_int8_scores_supported(const Backend& be);

// Which CPU kernels the attention ops use at most `cap`: "avx512", "avx2" or "scalar".
const char* attention_isa(Isa cap);

namespace detail {
// For every device: lim[i] = how many leading keys (positions [0, lim[i])) query tok_begin + i
// of a sequence sees, the sequence holding kv_len keys of which its n_q queries are the newest,
// under `kind` and the bidirectional `spans` (MaskDesc's rules); non-decreasing in i.
void query_key_limits(MaskKind kind, std::span<const KvSpan> spans, int32_t kv_len, int32_t n_q,
                      int32_t tok_begin, int32_t n, int32_t* lim);
}  // namespace detail

// A device's attention kernels (arguments as above; block tables and cu_seqlens are host
// memory, step metadata).
// The dispatchers resolve the defaults first: a device's entry gets every stride and the scale
// explicit (never 0), and a varlen call with tokens.
struct AttentionOps {
  void (*paged_attention)(const Backend&, const PagedAttentionArgs& args, const KvLayerView& kv,
                          std::span<const AttnSeq> seqs);
  void (*varlen_attention)(const Backend&, const VarlenAttentionArgs& args);
  bool (*varlen_int8_scores)(const Backend&) = nullptr;  // null: int8 scores unsupported
};

}  // namespace mmrt::kernels
