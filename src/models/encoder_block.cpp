#include "models/encoder_block.h"

#include "kernels/attention.h"
#include "kernels/ops.h"

namespace mmrt::models {

void run_encoder_block(const kernels::Backend& be, const EncoderBlock& b, const EncoderStep& s) {
  const int64_t N = s.n, E = s.embed;
  kernels::VarlenAttentionArgs va;
  va.q = s.qkv;
  va.k = s.qkv + E;
  va.v = s.qkv + 2 * E;
  va.out = s.attn;
  va.q_stride = va.k_stride = va.v_stride = 3 * E;
  va.cu_seqlens = s.cu_seqlens;
  va.n_heads = va.n_kv_heads = s.heads;
  va.head_dim = static_cast<int32_t>(E / s.heads);
  va.mask = kernels::MaskKind::kFull;

  kernels::layer_norm(be, s.x, b.ln1_w, b.ln1_b, s.eps, s.h, N, E);
  kernels::linear(be, s.h, N, b.qkv, s.qkv);
  if (s.rope) {
    kernels::apply_rope(be, *s.rope, s.qkv, s.heads, 3 * E);
    kernels::apply_rope(be, *s.rope, s.qkv + E, s.heads, 3 * E);
  }
  kernels::varlen_attention(be, va);
  kernels::linear(be, s.attn, N, b.proj, s.h);
  kernels::add(be, s.x, s.h, N * E);
  kernels::layer_norm(be, s.x, b.ln2_w, b.ln2_b, s.eps, s.h, N, E);
  kernels::linear(be, s.h, N, b.fc1, s.act);
  if (s.quick_gelu)
    kernels::quick_gelu(be, s.act, s.act, N * s.mlp);
  else
    kernels::gelu_erf(be, s.act, s.act, N * s.mlp);
  kernels::linear(be, s.act, N, b.fc2, s.h);
  kernels::add(be, s.x, s.h, N * E);
}

}  // namespace mmrt::models
