// Dispatchers of the attention ops: the backend's device table (a device without the op is told
// so first), then the arguments checked once for every device (block ids, query ranges, masks,
// strides).
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "kernels/kv_cache.h"

namespace mmrt::kernels {

namespace {

std::string seq_name(size_t i) {
  return "sequence " + std::to_string(i);
}

void check_mask(const MaskDesc& m, size_t i) {
  if (m.kind != MaskKind::kCausal && m.kind != MaskKind::kFull)
    throw InvalidArgument("attention: " + seq_name(i) + ": unknown mask kind");
  if (m.kind == MaskKind::kFull && !m.bidirectional.empty())
    throw InvalidArgument("attention: " + seq_name(i) +
                          ": bidirectional spans only apply to a causal mask");
  int32_t prev_end = 0;
  for (const KvSpan& s : m.bidirectional) {
    if (s.begin < prev_end || s.end <= s.begin)
      throw InvalidArgument("attention: " + seq_name(i) + ": bidirectional span [" +
                            std::to_string(s.begin) + ", " + std::to_string(s.end) +
                            ") is empty, negative, unsorted or overlapping");
    prev_end = s.end;
  }
}

void check_paged(const PagedAttentionArgs& a, const KvLayerView& kv,
                 std::span<const AttnSeq> seqs) {
  const int32_t hd = kv.head_dim, hk = kv.n_kv_heads, bs = kv.block_size;
  if (!kv.k || !kv.v || hk < 1 || kv.num_blocks < 1 || bs < 16 || bs % 16 || hd < 16 || hd % 16 ||
      hd > 512)
    throw InvalidArgument("paged_attention: malformed KvLayerView (use KvCache::layer)");
  if (kv.dtype != DType::kF32 && kv.dtype != DType::kBF16)
    throw InvalidArgument("paged_attention: KV dtype must be F32 or BF16");
  if (a.n_heads < 1 || a.n_heads % hk != 0)
    throw InvalidArgument("paged_attention: n_heads " + std::to_string(a.n_heads) +
                          " is not a positive multiple of n_kv_heads " + std::to_string(hk));
  const int64_t row = int64_t(a.n_heads) * hd;
  if ((a.q_stride && a.q_stride < row) || (a.out_stride && a.out_stride < row) || a.q_stride < 0 ||
      a.out_stride < 0)
    throw InvalidArgument("paged_attention: q/out row stride smaller than n_heads * head_dim");
  if (a.n_tokens < 0) throw InvalidArgument("paged_attention: negative n_tokens");
  if (a.n_tokens > 0 && (!a.q || !a.out)) throw InvalidArgument("paged_attention: null q/out");
  if (a.kv_splits < 0) throw InvalidArgument("paged_attention: negative kv_splits");
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttnSeq& s = seqs[i];
    if (s.n_q < 0 || s.q_begin < 0 || int64_t(s.q_begin) + s.n_q > a.n_tokens)
      throw InvalidArgument("paged_attention: " + seq_name(i) + ": query rows [" +
                            std::to_string(s.q_begin) + ", " + std::to_string(s.q_begin + s.n_q) +
                            ") outside [0, " + std::to_string(a.n_tokens) + ")");
    if (s.kv_len < s.n_q)
      throw InvalidArgument("paged_attention: " + seq_name(i) + ": kv_len " +
                            std::to_string(s.kv_len) + " < n_q " + std::to_string(s.n_q) +
                            " (the new tokens must already be in the cache)");
    check_mask(s.mask, i);
    if (s.n_q == 0) continue;
    if (!s.block_table)
      throw InvalidArgument("paged_attention: " + seq_name(i) + ": null block table");
    const int32_t n_blocks = (s.kv_len + bs - 1) / bs;
    for (int32_t b = 0; b < n_blocks; ++b)
      if (s.block_table[b] < 0 || s.block_table[b] >= kv.num_blocks)
        throw InvalidArgument("paged_attention: " + seq_name(i) + ": block_table[" +
                              std::to_string(b) + "] = " + std::to_string(s.block_table[b]) +
                              " outside [0, " + std::to_string(kv.num_blocks) + ")");
  }
}

void check_varlen(const VarlenAttentionArgs& a) {
  const int32_t hd = a.head_dim, hk = a.n_kv_heads;
  if (hd < 16 || hd % 16 != 0 || hd > 512)
    throw InvalidArgument("varlen_attention: head_dim must be a multiple of 16 in [16, 512], got " +
                          std::to_string(hd));
  if (hk < 1 || a.n_heads < 1 || a.n_heads % hk != 0)
    throw InvalidArgument("varlen_attention: n_heads " + std::to_string(a.n_heads) +
                          " is not a positive multiple of n_kv_heads " + std::to_string(hk));
  if (a.mask != MaskKind::kCausal && a.mask != MaskKind::kFull)
    throw InvalidArgument("varlen_attention: unknown mask kind");
  if (a.cu_seqlens.size() < 2 || a.cu_seqlens[0] != 0)
    throw InvalidArgument("varlen_attention: cu_seqlens must start at 0 and have >= 2 entries");
  for (size_t i = 1; i < a.cu_seqlens.size(); ++i)
    if (a.cu_seqlens[i] < a.cu_seqlens[i - 1])
      throw InvalidArgument("varlen_attention: cu_seqlens decreases at index " + std::to_string(i));
  if (a.kv_splits < 0) throw InvalidArgument("varlen_attention: negative kv_splits");
  const int64_t qrow = int64_t(a.n_heads) * hd, kvrow = int64_t(hk) * hd;
  auto short_row = [](int64_t stride, int64_t row) { return stride != 0 && stride < row; };
  if (short_row(a.q_stride, qrow) || short_row(a.out_stride, qrow) ||
      short_row(a.k_stride, kvrow) || short_row(a.v_stride, kvrow) || a.q_stride < 0 ||
      a.k_stride < 0 || a.v_stride < 0 || a.out_stride < 0)
    throw InvalidArgument("varlen_attention: a row stride is smaller than its row");
  if (a.cu_seqlens.back() > 0 && (!a.q || !a.k || !a.v || !a.out))
    throw InvalidArgument("varlen_attention: null pointer");
}

}  // namespace

namespace detail {

void query_key_limits(MaskKind kind, std::span<const KvSpan> spans, int32_t kv_len, int32_t n_q,
                      int32_t tok_begin, int32_t n, int32_t* lim) {
  if (kind == MaskKind::kFull) {
    for (int32_t i = 0; i < n; ++i) lim[i] = kv_len;
    return;
  }
  const int32_t p0 = kv_len - n_q + tok_begin;  // kv position of the first query
  const KvSpan* sp = spans.data();
  const KvSpan* end = spans.data() + spans.size();
  sp = std::upper_bound(sp, end, p0, [](int32_t p, const KvSpan& x) { return p < x.end; });
  for (int32_t i = 0; i < n; ++i) {
    const int32_t p = p0 + i;
    while (sp != end && sp->end <= p) ++sp;
    int32_t L = p + 1;
    if (sp != end && sp->begin <= p) L = std::max(L, std::min(sp->end, kv_len));
    lim[i] = L;
  }
}

}  // namespace detail

namespace {
float resolved_scale(float scale, int32_t head_dim) {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}
}  // namespace

void paged_attention(const Backend& be, const PagedAttentionArgs& args, const KvLayerView& kv,
                     std::span<const AttnSeq> seqs) {
  const auto fn =
      detail::entry(be, be.ops().attention, &AttentionOps::paged_attention, Op::kPagedAttention);
  check_paged(args, kv, seqs);
  PagedAttentionArgs a = args;
  const int64_t row = int64_t(a.n_heads) * kv.head_dim;
  if (!a.q_stride) a.q_stride = row;
  if (!a.out_stride) a.out_stride = row;
  a.scale = resolved_scale(a.scale, kv.head_dim);
  fn(be, a, kv, seqs);
}

bool varlen_int8_scores_supported(const Backend& be) {
  const AttentionOps* ops = be.ops().attention;
  return ops && ops->varlen_int8_scores && ops->varlen_int8_scores(be);
}

void varlen_attention(const Backend& be, const VarlenAttentionArgs& args) {
  const auto fn =
      detail::entry(be, be.ops().attention, &AttentionOps::varlen_attention, Op::kVarlenAttention);
  check_varlen(args);
  if (args.int8_scores && !varlen_int8_scores_supported(be))
    throw Unimplemented(
        "varlen_attention: this backend has no int8 attention scores (the CPU "
        "needs AVX512-VNNI and AVX512-BF16)");
  if (args.int8_scores && (args.mask != MaskKind::kFull || args.n_heads != args.n_kv_heads))
    throw InvalidArgument("varlen_attention: int8 scores take full masks and equal head counts");
  if (args.cu_seqlens.back() == 0) return;  // no tokens
  VarlenAttentionArgs a = args;
  const int64_t qrow = int64_t(a.n_heads) * a.head_dim, kvrow = int64_t(a.n_kv_heads) * a.head_dim;
  if (!a.q_stride) a.q_stride = qrow;
  if (!a.out_stride) a.out_stride = qrow;
  if (!a.k_stride) a.k_stride = kvrow;
  if (!a.v_stride) a.v_stride = kvrow;
  a.scale = resolved_scale(a.scale, a.head_dim);
  fn(be, a);
}

}  // namespace mmrt::kernels
