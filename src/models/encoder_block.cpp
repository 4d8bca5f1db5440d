#include "models/encoder_block.h"

#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/ops.h"

namespace mmrt::models {

kernels::WeightFormat EncoderPrecision::block_format(int64_t i, int64_t depth) const {
  return int8_block(i, depth) ? kernels::WeightFormat::kInt8 : fmt;
}

kernels::LinearOptions EncoderPrecision::block_options(int64_t i, int64_t depth) const {
  kernels::LinearOptions o;
  if (int8_block(i, depth)) {
    o.int8_gemm = kernels::Int8Gemm::kQ8Row;
    o.path = kernels::LinearPath::kGemm;
  }
  return o;
}

std::string EncoderPrecision::describe(int64_t depth) const {
  const std::string f(kernels::weight_format_name(fmt));
  if (int8 && only_block >= 0 && only_block < depth)
    return "int8 (block " + std::to_string(only_block) + " only; the rest " + f + ")";
  const int64_t n = int8 && only_block < 0 ? std::max<int64_t>(0, depth - keep_last) : 0;
  if (n == 0) return f;
  return "int8 (blocks 0-" + std::to_string(n - 1) + "; the last " + std::to_string(depth - n) +
         " and the projections " + f + ")";
}

EncoderPrecision encoder_precision(const kernels::Backend& be, const LoadOptions& opts,
                                   kernels::WeightFormat lm_format) {
  const std::string_view choice = opts.encoder_weights;
  const int64_t keep_last = opts.encoder_keep_last;
  if (choice != "auto" && choice != "bf16" && choice != "int8")
    throw InvalidArgument("encoder weights must be auto, bf16 or int8, got '" +
                          std::string(choice.substr(0, 40)) + "'");
  if (keep_last < 0) throw InvalidArgument("the encoder's kept blocks must be >= 0");
  EncoderPrecision p;
  p.fmt = lm_format == kernels::WeightFormat::kF32 ? kernels::WeightFormat::kF32
                                                   : kernels::WeightFormat::kBF16;
  p.keep_last = keep_last;
  p.only_block = opts.encoder_int8_block;
  if (choice == "bf16") return p;
  // Whether this backend's GEMM multiplies int8 by int8: asked of a small packed layer.
  bool native = false;
  if (be.has(kernels::Op::kLinear)) {
    const Tensor w = Tensor::zeros(DType::kF32, {16, 64});
    const kernels::PackedLinear probe =
        kernels::PackedLinear::pack(be, w, nullptr, kernels::WeightFormat::kInt8);
    kernels::LinearOptions o;
    o.path = kernels::LinearPath::kGemm;
    o.int8_gemm = kernels::Int8Gemm::kQ8Row;
    native = kernels::linear_plan(be, 64, probe, o).x_quantised_q8_row;
  }
  if (choice == "int8") {
    if (!native)
      throw InvalidArgument(
          "--encoder-weights int8: this backend has no int8 x int8 GEMM (the CPU needs "
          "AVX512-VNNI); use bf16 or auto");
    p.int8 = true;
  } else {
    p.int8 = native && lm_format != kernels::WeightFormat::kF32;
  }
  return p;
}

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
  va.bf16 = b.bf16_attention;

  auto norm = [&](const Tensor& w, const Tensor& bias) {
    if (b.rms_norm)
      kernels::rms_norm(be, s.x, w, s.eps, s.h, N, E);
    else
      kernels::layer_norm(be, s.x, w, bias, s.eps, s.h, N, E);
  };
  // The residual adds and the MLP's activation ride on the linears (LinearOptions::accumulate,
  // act): the same values as separate ops, without their passes over the rows.
  kernels::LinearOptions residual = b.opt;
  residual.accumulate = true;
  norm(b.ln1_w, b.ln1_b);
  kernels::linear(be, s.h, N, b.qkv, s.qkv, b.opt);
  if (s.rope)  // q's and k's heads are adjacent in each qkv row: one rotation over both
    kernels::apply_rope(be, *s.rope, s.qkv, 2 * s.heads, 3 * E);
  kernels::varlen_attention(be, va);
  kernels::linear(be, s.attn, N, b.proj, s.x, residual);  // x += proj(attn)
  norm(b.ln2_w, b.ln2_b);
  if (b.gated_silu) {
    if (!s.gate_up) throw InternalError("encoder block: a gated MLP needs EncoderStep::gate_up");
    kernels::linear(be, s.h, N, b.fc1, s.gate_up, b.opt);
    kernels::silu_mul_fused(be, s.gate_up, s.act, N, s.mlp);
  } else {
    kernels::LinearOptions act = b.opt;
    act.act = s.quick_gelu ? kernels::LinearAct::kQuickGelu : kernels::LinearAct::kGeluErf;
    kernels::linear(be, s.h, N, b.fc1, s.act, act);
  }
  kernels::linear(be, s.act, N, b.fc2, s.x, residual);  // x += fc2(...)
}

EncoderActivations::EncoderActivations(const kernels::Backend& be, int64_t rows, int64_t e,
                                       int64_t m, bool gated)
    : n(rows),
      embed(e),
      mlp(m),
      x(be, rows * e),
      h(be, rows * e),
      qkv(be, rows * 3 * e),
      attn(be, rows * e),
      act(be, rows * m),
      gate_up(be, gated ? rows * 2 * m : 0) {}

EncoderStep EncoderActivations::step(int32_t heads, float eps, bool quick_gelu,
                                     std::span<const int32_t> cu_seqlens,
                                     const kernels::RopeAngles* rope) {
  return EncoderStep{.n = n,
                     .embed = embed,
                     .mlp = mlp,
                     .heads = heads,
                     .eps = eps,
                     .quick_gelu = quick_gelu,
                     .cu_seqlens = cu_seqlens,
                     .rope = rope,
                     .x = x.data(),
                     .h = h.data(),
                     .qkv = qkv.data(),
                     .attn = attn.data(),
                     .act = act.data(),
                     .gate_up = gate_up.empty() ? nullptr : gate_up.data()};
}

void BlockJob::run(int64_t n) {
  if (n < 0 || n > parts() - done_)
    throw InternalError("encoder job: " + std::to_string(n) + " parts asked, " +
                        std::to_string(parts() - done_) + " left");
  for (int64_t k = 0; k < n; ++k, ++done_) {
    if (done_ == 0) begin();
    if (done_ < blocks_) block(done_);
    if (done_ + 1 == parts()) out_ = end();
  }
}

Tensor BlockJob::result() {
  if (done_ != parts()) throw InternalError("encoder job: the result asked before its last part");
  return std::move(out_);
}

}  // namespace mmrt::models
