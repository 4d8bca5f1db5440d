// The pre-norm transformer encoder layer two vision towers share (CLIP's and the Qwen2-VL ViT):
//   x += proj(attention(LN1(x)))      bidirectional within each segment, optional rotary on q, k
//   x += fc2(act(fc1(LN2(x))))        act: quick_gelu or exact GELU
// on the backend's ops only, over activation memory the caller owns (the backend's).
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/linear.h"
#include "kernels/rope.h"

namespace mmrt::models {

struct EncoderBlock {
  Tensor ln1_w, ln1_b, ln2_w, ln2_b;  // [embed], on the backend
  kernels::PackedLinear qkv;          // q|k|v [3 * embed, embed] + biases
  kernels::PackedLinear proj;         // [embed, embed] + bias
  kernels::PackedLinear fc1;          // [mlp, embed] + bias
  kernels::PackedLinear fc2;          // [embed, mlp] + bias
};

// One step of a stack of blocks: the shapes, the attention segments and the buffers.
struct EncoderStep {
  int64_t n = 0, embed = 0, mlp = 0;          // rows (patches), widths
  int32_t heads = 0;                          // head_dim = embed / heads
  float eps = 1e-6f;                          // both LayerNorms
  bool quick_gelu = true;                     // else exact GELU
  std::span<const int32_t> cu_seqlens;        // attention segments [n_seqs + 1] (host)
  const kernels::RopeAngles* rope = nullptr;  // rotary on q and k, or none
  float* x = nullptr;                         // [n, embed] the residual stream, in and out
  float* h = nullptr;                         // [n, embed] scratch
  float* qkv = nullptr;                       // [n, 3 * embed] scratch
  float* attn = nullptr;                      // [n, embed] scratch
  float* act = nullptr;                       // [n, mlp] scratch
};

void run_encoder_block(const kernels::Backend& be, const EncoderBlock& b, const EncoderStep& s);

}  // namespace mmrt::models
