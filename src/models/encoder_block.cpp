#include "models/encoder_block.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/layout.h"
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
  const std::string scores = int8_scores ? ", int8 attention scores" : "";
  if (int8 && only_block >= 0 && only_block < depth)
    return "int8 (block " + std::to_string(only_block) + " only" + scores + "; the rest " + f + ")";
  const int64_t n = int8 && only_block < 0 ? std::max<int64_t>(0, depth - keep_last) : 0;
  if (n == 0) return f;
  return "int8 (blocks 0-" + std::to_string(n - 1) + scores + "; the last " +
         std::to_string(depth - n) + " and the projections " + f + ")";
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
  p.int8_scores = p.int8 && kernels::varlen_int8_scores_supported(be);
  return p;
}

namespace {

// Bidirectional attention of R query rows over the first V key rows (V <= R) of a fused qkv
// buffer [R, 3 * H * hd] (rows 3 * H * hd apart): out [R, H * hd]. The kernel takes equal query
// and key segments with head_dim a multiple of 16, so the heads are zero-padded to a multiple of
// 16 (the dot products and the first hd output dims unchanged) and the V keys repeated under
// every V-row block of queries, one segment per block.
void key_masked_attention(const kernels::Backend& be, kernels::VarlenAttentionArgs va,
                          const float* qkv, int64_t R, int64_t V, float* out) {
  const int64_t H = va.n_heads, hd = va.head_dim, E = H * hd;
  va.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t hdp = (hd + 15) / 16 * 16, row = H * hdp;
  const int64_t blocks = (R + V - 1) / V, rows = blocks * V;
  kernels::Buffer q(be, rows * row);  // [rows, H, hdp], zero padded
  kernels::Buffer k(be, rows * row), v(be, rows * row), o(be, rows * row);
  // Heads padded to hdp: q rows as they are, the V key / value rows under every block.
  for (int64_t h = 0; h < H; ++h) {
    kernels::copy2d(be, q.data() + h * hdp, row, qkv + h * hd, 3 * E, R, hd);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      kernels::copy2d(be, k.data() + blk * V * row + h * hdp, row, qkv + E + h * hd, 3 * E, V, hd);
      kernels::copy2d(be, v.data() + blk * V * row + h * hdp, row, qkv + 2 * E + h * hd, 3 * E, V,
                      hd);
    }
  }
  std::vector<int32_t> cu(static_cast<size_t>(blocks + 1));
  for (int64_t i = 0; i <= blocks; ++i) cu[static_cast<size_t>(i)] = static_cast<int32_t>(i * V);
  va.q = q.data();
  va.k = k.data();
  va.v = v.data();
  va.out = o.data();
  va.q_stride = va.k_stride = va.v_stride = va.out_stride = 0;
  va.cu_seqlens = cu;
  va.head_dim = static_cast<int32_t>(hdp);
  kernels::varlen_attention(be, va);
  for (int64_t h = 0; h < H; ++h)
    kernels::copy2d(be, out + h * hd, E, o.data() + h * hdp, row, R, hd);
}

}  // namespace

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
  va.int8_scores = b.int8_attention;
  const bool masked = (s.keys > 0 && s.keys < N) || va.head_dim % 16 != 0;
  if (s.keys < 0 || s.keys > N || (masked && s.cu_seqlens.size() != 2))
    throw InternalError("encoder block: " + std::to_string(s.keys) + " keys of " +
                        std::to_string(N) + " rows in " + std::to_string(s.cu_seqlens.size() - 1) +
                        " segments");

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
  if (masked)
    key_masked_attention(be, va, s.qkv, N, s.keys > 0 ? s.keys : N, s.attn);
  else
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
  check_run(n);
  for (int64_t k = 0; k < n; ++k, ++done_) {
    if (done_ == 0) begin();
    if (done_ < blocks_) block(done_);
    if (done_ + 1 == parts()) out_ = end();
  }
}

Tensor BlockJob::result() {
  check_finished();
  return std::move(out_);
}

namespace {

class MappedJob final : public EncodeJob {
 public:
  MappedJob(std::unique_ptr<EncodeJob> job, std::function<Tensor(Tensor)> f)
      : job_(std::move(job)), f_(std::move(f)) {}
  int64_t parts() const override { return job_->parts(); }
  int64_t done() const override { return job_->done(); }
  void run(int64_t n) override { job_->run(n); }
  Tensor result() override { return f_(job_->result()); }

 private:
  std::unique_ptr<EncodeJob> job_;
  std::function<Tensor(Tensor)> f_;
};

class ConcatJob final : public EncodeJob {
 public:
  ConcatJob(const kernels::Backend& be, std::vector<std::unique_ptr<EncodeJob>> jobs, int64_t cols,
            Tensor keep)
      : be_(be), jobs_(std::move(jobs)), cols_(cols), keep_(std::move(keep)) {
    for (const auto& j : jobs_) {
      if (j->parts() < 1 || j->done() != 0)
        throw InternalError("encoder job: a job to concatenate has no parts or has begun");
      parts_ += j->parts();
    }
    results_.resize(jobs_.size());
  }
  int64_t parts() const override { return parts_; }
  int64_t done() const override { return done_; }
  void run(int64_t n) override {
    check_run(n);
    while (n > 0) {
      EncodeJob& j = *jobs_[cur_];
      const int64_t k = std::min(n, j.parts() - j.done());
      j.run(k);
      n -= k;
      done_ += k;
      if (j.done() == j.parts()) results_[cur_++] = j.result();
    }
  }
  Tensor result() override {
    check_finished();
    int64_t rows = 0;
    for (const Tensor& t : results_) {
      if (t.rank() != 2 || t.dim(1) != cols_)
        throw InternalError("encoder job: a part's result is " + t.describe() + ", not [rows, " +
                            std::to_string(cols_) + "]");
      rows += t.dim(0);
    }
    Tensor out = be_.empty(DType::kF32, {rows, cols_});
    int64_t row = 0;
    for (const Tensor& t : results_) {
      if (t.dim(0) > 0)
        kernels::copy2d(be_, out.data<float>() + row * cols_, cols_, t.data<float>(), cols_,
                        t.dim(0), cols_);
      row += t.dim(0);
    }
    results_.clear();
    return out;
  }

 private:
  const kernels::Backend& be_;
  std::vector<std::unique_ptr<EncodeJob>> jobs_;
  std::vector<Tensor> results_;
  int64_t cols_, parts_ = 0, done_ = 0;
  size_t cur_ = 0;
  Tensor keep_;
};

}  // namespace

std::unique_ptr<EncodeJob> map_result(std::unique_ptr<EncodeJob> job,
                                      std::function<Tensor(Tensor)> f) {
  return std::make_unique<MappedJob>(std::move(job), std::move(f));
}

std::unique_ptr<EncodeJob> concat_jobs(const kernels::Backend& be,
                                       std::vector<std::unique_ptr<EncodeJob>> jobs, int64_t cols,
                                       Tensor keep) {
  return std::make_unique<ConcatJob>(be, std::move(jobs), cols, std::move(keep));
}

}  // namespace mmrt::models
