// The pre-norm transformer encoder layer the vision towers share (CLIP's, the Qwen2-VL and
// Qwen2.5-VL ViTs):
//   x += proj(attention(N1(x)))      bidirectional within each segment, optional rotary on q, k
//   x += fc2(act(fc1(N2(x))))        act: quick_gelu or exact GELU
//   x += fc2(silu(gate) * up)        gated (Qwen2.5-VL): fc1 = gate|up, fc2 = down
// N: LayerNorm with bias, or RMSNorm (Qwen2.5-VL). The Whisper-style audio tower's layers are the
// same with exact GELU and its keys masked past the window's valid frames (EncoderStep::keys).
// on the backend's ops only, over activation memory the caller owns (the backend's).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/linear.h"
#include "kernels/rope.h"
#include "kernels/scratch.h"
#include "models/model.h"

namespace mmrt::models {

// How an encoder stores and multiplies its linear layers (LoadOptions::encoder_weights, resolved
// by encoder_precision for a backend and a model). The SOP for quantised vision encoders: int8
// blocks, except the last `keep_last`, the first patch embedding and the projector / merger,
// which stay in `fmt`.
struct EncoderPrecision {
  kernels::WeightFormat fmt = kernels::WeightFormat::kBF16;  // the 16-bit (or f32) layers
  bool int8 = false;  // the other blocks: int8 weights per output channel, x int8 per row
  int64_t keep_last = 3;
  int64_t only_block = -1;  // >= 0: this block alone in int8 (the sensitivity report)
  // The int8 blocks' attention scores from int8 q and k too (VarlenAttentionArgs::int8_scores),
  // where the backend has them (encoder_precision decides).
  bool int8_scores = false;
  EncoderPrecision() = default;
  // Every layer in `f` (int8 here is weight-only, as the language model's prefill).
  EncoderPrecision(kernels::WeightFormat f) : fmt(f) {}  // NOLINT: implicit on purpose
  bool int8_block(int64_t i, int64_t depth) const {
    return int8 && (only_block >= 0 ? i == only_block : i < depth - keep_last);
  }
  bool int8_attention(int64_t i, int64_t depth) const {
    return int8_scores && int8_block(i, depth);
  }
  kernels::WeightFormat block_format(int64_t i, int64_t depth) const;
  // kQ8Row GEMMs for an int8 block (on the GEMM path at any row count: one rounding rule).
  kernels::LinearOptions block_options(int64_t i, int64_t depth) const;
  // kGemmOnly for an int8 block (its GEMMs alone read the weights: the backend's GEMM layout),
  // else kViewIfPossible (16-bit weights stay in the mapped checkpoint: the towers' GEMMs are
  // compute-bound over hundreds of rows, a load-time copy gained nothing measurable).
  kernels::WeightPlacement block_placement(int64_t i, int64_t depth) const {
    return int8_block(i, depth) ? kernels::WeightPlacement::kGemmOnly
                                : kernels::WeightPlacement::kViewIfPossible;
  }
  // For logs and cache keys, e.g. "int8 (blocks 0-28; the last 3 and the projections bf16)",
  // "int8 (blocks 0-28, int8 attention scores; ...)" with int8_scores.
  std::string describe(int64_t depth) const;
  // Attention in bf16 products where the backend has them: every encoder but an f32 one.
  bool bf16_attention() const { return fmt != kernels::WeightFormat::kF32; }
};

// What LoadOptions::encoder_weights ("auto", "bf16" or "int8") means here: auto is int8 where
// the backend multiplies int8 x int8 in its GEMM (AVX512-VNNI) and the language model is not f32,
// else 16-bit; the 16-bit format is f32 for an f32 model, else bf16. InvalidArgument for an
// explicit int8 the backend cannot run.
EncoderPrecision encoder_precision(const kernels::Backend& be, const LoadOptions& o,
                                   kernels::WeightFormat lm_format);

struct EncoderBlock {
  Tensor ln1_w, ln1_b, ln2_w, ln2_b;  // [embed], on the backend (no biases: RMSNorm)
  kernels::PackedLinear qkv;          // q|k|v [3 * embed, embed] + biases
  kernels::PackedLinear proj;         // [embed, embed] + bias
  kernels::PackedLinear fc1;          // [mlp, embed] + bias; gated: [2 * mlp, embed] gate|up
  kernels::PackedLinear fc2;          // [embed, mlp] + bias
  kernels::LinearOptions opt;         // for all four (EncoderPrecision::block_options)
  bool bf16_attention = false;        // VarlenAttentionArgs::bf16 (a 16-bit encoder)
  bool int8_attention = false;        // VarlenAttentionArgs::int8_scores (an int8 block)
  bool rms_norm = false;              // RMSNorm (weights only), else LayerNorm
  bool gated_silu = false;            // fc2(silu(gate) * up), else fc2(act(fc1(x)))
};

// One step of a stack of blocks: the shapes, the attention segments and the buffers.
struct EncoderStep {
  int64_t n = 0, embed = 0, mlp = 0;          // rows (patches), widths
  int32_t heads = 0;                          // head_dim = embed / heads
  float eps = 1e-6f;                          // both LayerNorms
  bool quick_gelu = true;                     // else exact GELU
  std::span<const int32_t> cu_seqlens;        // attention segments [n_seqs + 1] (host)
  const kernels::RopeAngles* rope = nullptr;  // rotary on q and k, or none
  // > 0: every query attends to the first `keys` rows only (one segment; the audio tower's
  // padded window); 0: to every row of its segment.
  int64_t keys = 0;
  float* x = nullptr;        // [n, embed] the residual stream, in and out
  float* h = nullptr;        // [n, embed] scratch
  float* qkv = nullptr;      // [n, 3 * embed] scratch
  float* attn = nullptr;     // [n, embed] scratch
  float* act = nullptr;      // [n, mlp] scratch
  float* gate_up = nullptr;  // [n, 2 * mlp] scratch (gated blocks only)
};

void run_encoder_block(const kernels::Backend& be, const EncoderBlock& b, const EncoderStep& s);

// The activations of a stack of blocks over n rows, in the backend's memory, and the step over
// them.
struct EncoderActivations {
  int64_t n = 0, embed = 0, mlp = 0;
  kernels::Buffer x, h, qkv, attn, act, gate_up;  // gate_up: gated blocks only
  EncoderActivations() = default;
  EncoderActivations(const kernels::Backend& be, int64_t n, int64_t embed, int64_t mlp, bool gated);
  EncoderStep step(int32_t heads, float eps, bool quick_gelu, std::span<const int32_t> cu_seqlens,
                   const kernels::RopeAngles* rope);
};

// A tower's forward() as an EncodeJob of one part per block and one more for its end: begin()
// runs with the first part, block(i) is part i, end() is the last part and gives the output. The
// end is a part of its own because it can weigh more than a block (LLaVA's projector into a
// 4,096-wide language model: about three CLIP layers' time, measured), and the scheduler prices
// every part of an item alike.
class BlockJob : public EncodeJob {
 public:
  explicit BlockJob(int64_t blocks) : blocks_(std::max<int64_t>(0, blocks)) {}
  // The parts of a job of `blocks` blocks.
  static constexpr int64_t parts_for(int64_t blocks) { return (blocks > 0 ? blocks : 0) + 1; }
  int64_t parts() const final { return parts_for(blocks_); }
  int64_t done() const final { return done_; }
  void run(int64_t n) final;
  Tensor result() final;

 protected:
  virtual void begin() = 0;
  virtual void block(int64_t i) = 0;
  virtual Tensor end() = 0;

 private:
  int64_t blocks_, done_ = 0;
  Tensor out_;
};

// `job`'s parts, its result passed through `f` after the last (LLaVA's packing of the crops).
std::unique_ptr<EncodeJob> map_result(std::unique_ptr<EncodeJob> job,
                                      std::function<Tensor(Tensor)> f);

// `jobs` one after another as one job of all their parts; the result: their results' rows
// concatenated, [sum of rows, cols] f32 on `be` (each result [rows_i, cols]). `keep` lives as
// long as the job (the memory the jobs read, e.g. the item's features on the device).
std::unique_ptr<EncodeJob> concat_jobs(const kernels::Backend& be,
                                       std::vector<std::unique_ptr<EncodeJob>> jobs, int64_t cols,
                                       Tensor keep = {});

}  // namespace mmrt::models
