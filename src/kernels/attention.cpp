// Dispatchers of the attention ops: the backend's device table.
#include "kernels/attention.h"

namespace mmrt::kernels {

void paged_attention(const Backend& be, const PagedAttentionArgs& args, const KvLayerView& kv,
                     std::span<const AttnSeq> seqs) {
  detail::entry(be, be.ops().attention, &AttentionOps::paged_attention, Op::kPagedAttention)(
      be, args, kv, seqs);
}

void varlen_attention(const Backend& be, const VarlenAttentionArgs& args) {
  detail::entry(be, be.ops().attention, &AttentionOps::varlen_attention, Op::kVarlenAttention)(
      be, args);
}

}  // namespace mmrt::kernels
