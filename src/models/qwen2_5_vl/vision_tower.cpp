#include "models/qwen2_5_vl/vision_tower.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "kernels/layout.h"
#include "kernels/ops.h"
#include "kernels/rope.h"
#include "kernels/scratch.h"
#include "models/qwen2_vl/vision_tower.h"

namespace mmrt::models::qwen2_5_vl {

WindowOrder window_order(std::span<const GridThw> grids, const VisionConfig& vc) {
  const int64_t ms = vc.spatial_merge_size, unit = ms * ms, win = vc.window_tokens();
  WindowOrder o;
  o.cu_window.push_back(0);
  o.cu_frame.push_back(0);
  int64_t base = 0;  // merged tokens of the grids before this one
  for (const GridThw& g : grids) {
    const int64_t gh = g[1] / ms, gw = g[2] / ms;
    const int64_t nwh = (gh + win - 1) / win, nww = (gw + win - 1) / win;
    for (int64_t t = 0; t < g[0]; ++t) {
      for (int64_t wy = 0; wy < nwh; ++wy)
        for (int64_t wx = 0; wx < nww; ++wx) {
          const int64_t y1 = std::min(gh, (wy + 1) * win), x1 = std::min(gw, (wx + 1) * win);
          for (int64_t y = wy * win; y < y1; ++y)
            for (int64_t x = wx * win; x < x1; ++x)
              o.index.push_back(static_cast<int32_t>(base + (t * gh + y) * gw + x));
          o.cu_window.push_back(static_cast<int32_t>(o.index.size() * unit));
        }
      o.cu_frame.push_back(static_cast<int32_t>(o.index.size() * unit));
    }
    base += g[0] * gh * gw;
  }
  return o;
}

struct VisionTower::Impl {
  VisionConfig vc;
  const kernels::Backend* be = nullptr;
  kernels::PackedLinear patch_embed;  // [embed, C*T*p*p]
  std::vector<EncoderBlock> blocks;
  Tensor ln_q_w;               // [embed]
  kernels::PackedLinear mlp0;  // [4 * embed, 4 * embed] + bias
  kernels::PackedLinear mlp2;  // [out_hidden, 4 * embed] + bias
  kernels::RopeTable rope;
};

VisionTower::VisionTower(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VisionTower::~VisionTower() = default;

int64_t VisionTower::patch_dim() const {
  const auto& v = impl_->vc;
  return v.in_chans * v.temporal_patch_size * v.patch_size * v.patch_size;
}

double VisionTower::flops(const GridThw& g) const {
  const auto& v = impl_->vc;
  const double n = static_cast<double>(g[0] * g[1] * g[2]);
  const double e = static_cast<double>(v.hidden_size), i = static_cast<double>(v.intermediate_size);
  // Attention: 4 * e per (query, key) pair of a segment.
  const WindowOrder o = window_order({&g, 1}, v);
  auto pairs = [](const std::vector<int32_t>& cu) {
    double s = 0;
    for (size_t k = 1; k < cu.size(); ++k)
      s += static_cast<double>(cu[k] - cu[k - 1]) * (cu[k] - cu[k - 1]);
    return s;
  };
  const double window_pairs = pairs(o.cu_window), frame_pairs = pairs(o.cu_frame);
  double total = 2 * n * e * static_cast<double>(patch_dim());
  for (int64_t b = 0; b < v.depth; ++b)
    total += 2 * n * (4 * e * e + 3 * e * i) +
             4 * e * (v.full_attention(b) ? frame_pairs : window_pairs);
  const double unit = static_cast<double>(v.spatial_merge_size * v.spatial_merge_size);
  const double merged = n / unit, me = e * unit;
  return total + 2 * merged * (me * me + me * static_cast<double>(v.out_hidden_size));
}

std::unique_ptr<VisionTower> VisionTower::load(const kernels::Backend& be,
                                               const io::SafeTensors& st, const Config& cfg,
                                               const EncoderPrecision& prec) {
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.vc = cfg.vision;
  m.be = &be;
  const qwen2_vl::Naming naming = qwen2_vl::detect_naming(st.names(), st.path());
  // Compute-bound GEMMs over hundreds of patch rows: the weights stay in the mapped checkpoint.
  constexpr auto kPlace = kernels::WeightPlacement::kViewIfPossible;
  auto get = [&](const std::string& c) { return st.get(qwen2_vl::tensor_name(naming, c)); };
  const kernels::WeightFormat fmt = prec.fmt;
  auto lin = [&](const std::string& base, kernels::WeightFormat f, kernels::WeightPlacement place) {
    Tensor w = get(base + ".weight"), b = get(base + ".bias");
    return kernels::PackedLinear::pack(be, w, &b, f, place);
  };
  Tensor pw = get("visual.patch_embed.proj.weight");  // [embed, C, T, p, p], no bias
  m.patch_embed =
      kernels::PackedLinear::pack(be, pw.reshape({pw.dim(0), -1}), nullptr, fmt, kPlace);
  m.blocks.resize(static_cast<size_t>(m.vc.depth));
  for (int64_t i = 0; i < m.vc.depth; ++i) {
    const std::string p = "visual.blocks." + std::to_string(i) + ".";
    EncoderBlock& b = m.blocks[static_cast<size_t>(i)];
    b.rms_norm = true;
    b.gated_silu = true;
    b.ln1_w = be.upload(get(p + "norm1.weight"));
    b.ln2_w = be.upload(get(p + "norm2.weight"));
    const kernels::WeightFormat f = prec.block_format(i, m.vc.depth);
    const kernels::WeightPlacement pl = prec.block_placement(i, m.vc.depth);
    b.qkv = lin(p + "attn.qkv", f, pl);
    b.proj = lin(p + "attn.proj", f, pl);
    Tensor gw = get(p + "mlp.gate_proj.weight"), gb = get(p + "mlp.gate_proj.bias");
    Tensor uw = get(p + "mlp.up_proj.weight"), ub = get(p + "mlp.up_proj.bias");
    const Tensor* ws[] = {&gw, &uw};
    const Tensor* bs[] = {&gb, &ub};
    b.fc1 = kernels::PackedLinear::pack_concat(be, ws, bs, f, pl);
    b.fc2 = lin(p + "mlp.down_proj", f, pl);
    b.opt = prec.block_options(i, m.vc.depth);
    b.bf16_attention = prec.bf16_attention();
    b.int8_attention = prec.int8_attention(i, m.vc.depth);
  }
  m.ln_q_w = be.upload(get("visual.merger.ln_q.weight"));
  m.mlp0 = lin("visual.merger.mlp.0", fmt, kPlace);
  m.mlp2 = lin("visual.merger.mlp.2", fmt, kPlace);
  m.rope = kernels::make_vision_rope_table(static_cast<int32_t>(m.vc.head_dim()), 10000.0);
  return std::unique_ptr<VisionTower>(new VisionTower(std::move(impl)));
}

// forward() as a job of one part per block and a last one for the merger and the reordering
// back: the window reordering, the patch embedding and the rotary angles run with the first
// part. Its buffers live as long as the job.
class VisionTower::Job final : public BlockJob {
 public:
  Job(const Impl& m, const Tensor& pixel_values, std::span<const GridThw> grids, int64_t patch_dim)
      : BlockJob(m.vc.depth),
        m_(m),
        pg_(qwen2_vl::patch_grid(pixel_values, grids, patch_dim, m.vc.spatial_merge_size)),
        order_(window_order(grids, m.vc)),
        src_(m.be->upload(pixel_values.contiguous())) {}  // the one copy to the backend

 private:
  void begin() override {
    const kernels::Backend& be = *m_.be;
    const auto& vc = m_.vc;
    const int64_t unit = vc.spatial_merge_size * vc.spatial_merge_size;
    const int64_t D = src_.dim(1), N = pg_.n, M = N / unit;
    // Window order: merged token index[j]'s patch rows (and positions) move to rows j*unit...
    kernels::Buffer px(be, N * D);  // reordered
    std::vector<int32_t> wpos(static_cast<size_t>(2 * N));
    for (int64_t j = 0; j < M; ++j) {
      const int64_t k = order_.index[static_cast<size_t>(j)];
      kernels::copy2d(be, px.data() + j * unit * D, D, src_.data<float>() + k * unit * D, D, unit,
                      D);
      for (int64_t u = 0; u < unit; ++u)
        for (int64_t a = 0; a < 2; ++a)
          wpos[static_cast<size_t>(a * N + j * unit + u)] =
              pg_.positions[static_cast<size_t>(a * N + k * unit + u)];
    }
    a_ = EncoderActivations(be, N, vc.hidden_size, vc.intermediate_size, true);
    kernels::linear(be, px.data(), N, m_.patch_embed, a_.x.data());
    angles_ = kernels::rope_angles(be, m_.rope, wpos.data(), N);
    step_ = a_.step(static_cast<int32_t>(vc.num_heads), 1e-6f, false, {}, &angles_);
  }
  void block(int64_t b) override {
    step_.cu_seqlens = m_.vc.full_attention(b) ? order_.cu_frame : order_.cu_window;
    run_encoder_block(*m_.be, m_.blocks[static_cast<size_t>(b)], step_);
  }
  // Merger: RMSNorm per patch, then each merged token's 4 consecutive rows as one vector; then
  // back to the image's order (window position j holds merged token index[j]).
  Tensor end() override {
    const kernels::Backend& be = *m_.be;
    const auto& vc = m_.vc;
    const int64_t E = vc.hidden_size, unit = vc.spatial_merge_size * vc.spatial_merge_size;
    const int64_t N = pg_.n, M = N / unit, ME = E * unit, O = vc.out_hidden_size;
    kernels::rms_norm(be, a_.x.data(), m_.ln_q_w, 1e-6f, a_.h.data(), N, E);
    kernels::Buffer mid(be, M * ME);  // [M, 4 * embed]
    kernels::linear(be, a_.h.data(), M, m_.mlp0, mid.data(),
                    kernels::LinearOptions{.act = kernels::LinearAct::kGeluErf});
    kernels::Buffer merged(be, M * O);
    kernels::linear(be, mid.data(), M, m_.mlp2, merged.data());
    Tensor out = be.empty(DType::kF32, {M, O});
    for (int64_t j = 0; j < M; ++j)
      kernels::copy2d(be, out.data<float>() + order_.index[static_cast<size_t>(j)] * O, O,
                      merged.data() + j * O, O, 1, O);
    return out;
  }
  const Impl& m_;
  qwen2_vl::PatchGrid pg_;
  WindowOrder order_;
  Tensor src_;
  EncoderActivations a_;
  kernels::RopeAngles angles_;
  EncoderStep step_;
};

int64_t VisionTower::parts() const {
  return BlockJob::parts_for(impl_->vc.depth);
}

std::unique_ptr<EncodeJob> VisionTower::begin(const Tensor& pixel_values,
                                              std::span<const GridThw> grids) {
  return std::make_unique<Job>(*impl_, pixel_values, grids, patch_dim());
}

}  // namespace mmrt::models::qwen2_5_vl
