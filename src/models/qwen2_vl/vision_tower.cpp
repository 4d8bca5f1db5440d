#include "models/qwen2_vl/vision_tower.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "kernels/rope.h"
#include "kernels/scratch.h"
#include "models/encoder_block.h"

namespace mmrt::models::qwen2_vl {

struct VisionTower::Impl {
  VisionConfig vc;
  const kernels::Backend* be = nullptr;
  kernels::PackedLinear patch_embed;  // [embed, C*T*p*p]
  std::vector<EncoderBlock> blocks;
  Tensor ln_q_w, ln_q_b;       // [embed]
  kernels::PackedLinear mlp0;  // [4 * embed, 4 * embed] + bias
  kernels::PackedLinear mlp2;  // [out_hidden, 4 * embed] + bias
  kernels::RopeTable rope;
  bool quick_gelu = true;
};

PatchGrid patch_grid(const Tensor& pixel_values, std::span<const GridThw> grids, int64_t patch_dim,
                     int64_t merge) {
  const int64_t ms = merge;
  if (pixel_values.dtype() != DType::kF32 || pixel_values.rank() != 2 ||
      pixel_values.dim(1) != patch_dim)
    throw InvalidArgument("vision tower: pixel_values must be f32 [n_patches, " +
                          std::to_string(patch_dim) + "], got " + pixel_values.describe());
  PatchGrid p;
  for (const auto& g : grids) {
    if (g[0] < 1 || g[1] < 1 || g[2] < 1 || g[1] % ms || g[2] % ms)
      throw InvalidArgument("vision tower: grid_thw (" + std::to_string(g[0]) + ", " +
                            std::to_string(g[1]) + ", " + std::to_string(g[2]) +
                            ") must be positive with h, w multiples of " + std::to_string(ms));
    p.n += g[0] * g[1] * g[2];
  }
  const int64_t N = p.n;
  if (N != pixel_values.dim(0))
    throw InvalidArgument("vision tower: grid_thw covers " + std::to_string(N) +
                          " patches but pixel_values has " + std::to_string(pixel_values.dim(0)) +
                          " rows");
  p.positions.resize(static_cast<size_t>(2 * N));
  p.frames.push_back(0);
  int64_t r = 0;
  for (const auto& g : grids) {
    for (int64_t t = 0; t < g[0]; ++t) {
      for (int64_t bh = 0; bh < g[1] / ms; ++bh)
        for (int64_t bw = 0; bw < g[2] / ms; ++bw)
          for (int64_t mh = 0; mh < ms; ++mh)
            for (int64_t mw = 0; mw < ms; ++mw, ++r) {
              p.positions[static_cast<size_t>(r)] = static_cast<int32_t>(bh * ms + mh);
              p.positions[static_cast<size_t>(N + r)] = static_cast<int32_t>(bw * ms + mw);
            }
      p.frames.push_back(static_cast<int32_t>(r));
    }
  }
  return p;
}

VisionTower::VisionTower(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VisionTower::~VisionTower() = default;

int64_t VisionTower::patch_dim() const {
  const auto& v = impl_->vc;
  return v.in_chans * v.temporal_patch_size * v.patch_size * v.patch_size;
}
int64_t VisionTower::out_hidden() const {
  return impl_->vc.hidden_size;
}

double VisionTower::flops(const GridThw& g) const {
  const auto& v = impl_->vc;
  double n = static_cast<double>(g[0] * g[1] * g[2]);
  double e = static_cast<double>(v.embed_dim), m = static_cast<double>(v.mlp_hidden());
  double frame = static_cast<double>(g[1] * g[2]);
  double per_block = 2 * n * (3 * e * e + e * e + 2 * e * m) + 4 * n * frame * e;
  double merged = n / static_cast<double>(v.spatial_merge_size * v.spatial_merge_size);
  double me = e * static_cast<double>(v.spatial_merge_size * v.spatial_merge_size);
  return 2 * n * e * static_cast<double>(patch_dim()) + per_block * static_cast<double>(v.depth) +
         2 * merged * (me * me + me * static_cast<double>(v.hidden_size));
}

std::unique_ptr<VisionTower> VisionTower::load(const kernels::Backend& be,
                                               const io::SafeTensors& st, const Config& cfg,
                                               const EncoderPrecision& prec) {
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.vc = cfg.vision;
  m.be = &be;
  if (m.vc.hidden_act != "quick_gelu" && m.vc.hidden_act != "gelu")
    throw Unimplemented("vision_config.hidden_act '" + m.vc.hidden_act +
                        "' is not supported (quick_gelu or gelu)");
  m.quick_gelu = m.vc.hidden_act == "quick_gelu";
  const Naming naming = detect_naming(st.names(), st.path());
  // The tower's linears run as GEMMs over hundreds of patch rows (compute-bound), so its weights
  // stay in the mapped checkpoint: no load-time copy for no measurable gain.
  constexpr auto kPlace = kernels::WeightPlacement::kViewIfPossible;
  auto get = [&](const std::string& c) { return st.get(tensor_name(naming, c)); };
  const kernels::WeightFormat fmt = prec.fmt;
  auto lin = [&](const std::string& base, kernels::WeightFormat f, kernels::WeightPlacement place) {
    Tensor w = get(base + ".weight"), b = get(base + ".bias");
    return kernels::PackedLinear::pack(be, w, &b, f, place);
  };
  Tensor pw = get("visual.patch_embed.proj.weight");  // [embed, C, T, p, p]
  Tensor pw2 = pw.reshape({pw.dim(0), -1});           // [embed, C*T*p*p], same (c,t,y,x) order
  m.patch_embed = kernels::PackedLinear::pack(be, pw2, nullptr, fmt, kPlace);
  m.blocks.resize(static_cast<size_t>(m.vc.depth));
  for (int64_t i = 0; i < m.vc.depth; ++i) {
    std::string p = "visual.blocks." + std::to_string(i) + ".";
    EncoderBlock& b = m.blocks[static_cast<size_t>(i)];
    b.ln1_w = be.upload(get(p + "norm1.weight"));
    b.ln1_b = be.upload(get(p + "norm1.bias"));
    b.ln2_w = be.upload(get(p + "norm2.weight"));
    b.ln2_b = be.upload(get(p + "norm2.bias"));
    const kernels::WeightFormat f = prec.block_format(i, m.vc.depth);
    const kernels::WeightPlacement pl = prec.block_placement(i, m.vc.depth);
    b.qkv = lin(p + "attn.qkv", f, pl);
    b.proj = lin(p + "attn.proj", f, pl);
    b.fc1 = lin(p + "mlp.fc1", f, pl);
    b.fc2 = lin(p + "mlp.fc2", f, pl);
    b.opt = prec.block_options(i, m.vc.depth);
    b.bf16_attention = prec.bf16_attention();
    b.int8_attention = prec.int8_attention(i, m.vc.depth);
  }
  m.ln_q_w = be.upload(get("visual.merger.ln_q.weight"));
  m.ln_q_b = be.upload(get("visual.merger.ln_q.bias"));
  m.mlp0 = lin("visual.merger.mlp.0", fmt, kPlace);
  m.mlp2 = lin("visual.merger.mlp.2", fmt, kPlace);
  m.rope = kernels::make_vision_rope_table(static_cast<int32_t>(m.vc.head_dim()), 10000.0);
  return std::unique_ptr<VisionTower>(new VisionTower(std::move(impl)));
}

// forward() as a job of one part per block and the merger's: the patch embedding and the rotary
// angles run with the first part. Its buffers live as long as the job.
class VisionTower::Job final : public BlockJob {
 public:
  Job(const Impl& m, const Tensor& pixel_values, std::span<const GridThw> grids, int64_t patch_dim)
      : BlockJob(static_cast<int64_t>(m.blocks.size())),
        m_(m),
        pg_(patch_grid(pixel_values, grids, patch_dim, m.vc.spatial_merge_size)),
        px_(m.be->upload(pixel_values.contiguous())) {}  // the one copy of the features

 private:
  void begin() override {
    const kernels::Backend& be = *m_.be;
    a_ = EncoderActivations(be, pg_.n, m_.vc.embed_dim, m_.vc.mlp_hidden(), false);
    kernels::linear(be, px_.data<float>(), pg_.n, m_.patch_embed, a_.x.data());
    angles_ = kernels::rope_angles(be, m_.rope, pg_.positions.data(), pg_.n);
    step_ =
        a_.step(static_cast<int32_t>(m_.vc.num_heads), kEps, m_.quick_gelu, pg_.frames, &angles_);
  }
  void block(int64_t i) override {
    run_encoder_block(*m_.be, m_.blocks[static_cast<size_t>(i)], step_);
  }
  // Merger: LayerNorm per patch, then merge x merge blocks (consecutive rows) as one vector.
  Tensor end() override {
    const kernels::Backend& be = *m_.be;
    const int64_t N = pg_.n, E = m_.vc.embed_dim, ms = m_.vc.spatial_merge_size;
    kernels::layer_norm(be, a_.x.data(), m_.ln_q_w, m_.ln_q_b, kEps, a_.h.data(), N, E);
    const int64_t M = N / (ms * ms), ME = E * ms * ms;
    kernels::Buffer mid(be, M * ME);  // [M, 4 * embed]
    kernels::linear(be, a_.h.data(), M, m_.mlp0, mid.data(),
                    kernels::LinearOptions{.act = kernels::LinearAct::kGeluErf});
    Tensor out = be.empty(DType::kF32, {M, m_.vc.hidden_size});  // [M, out_hidden]
    kernels::linear(be, mid.data(), M, m_.mlp2, out.data<float>());
    return out;
  }
  static constexpr float kEps = 1e-6f;
  const Impl& m_;
  PatchGrid pg_;
  Tensor px_;
  EncoderActivations a_;
  kernels::RopeAngles angles_;
  EncoderStep step_;
};

int64_t VisionTower::parts() const {
  return BlockJob::parts_for(static_cast<int64_t>(impl_->blocks.size()));
}

std::unique_ptr<EncodeJob> VisionTower::begin(const Tensor& pixel_values,
                                              std::span<const GridThw> grids) {
  return std::make_unique<Job>(*impl_, pixel_values, grids, patch_dim());
}

}  // namespace mmrt::models::qwen2_vl
