#include "models/llava/clip_tower.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "kernels/layout.h"
#include "kernels/ops.h"
#include "kernels/scratch.h"
#include "models/encoder_block.h"

namespace mmrt::models::llava {

struct ClipTower::Impl {
  VisionConfig vc;
  const kernels::Backend* be = nullptr;
  kernels::PackedLinear patch_embed;  // [embed, C*p*p], no bias
  kernels::Buffer class_embedding;    // [embed] f32
  kernels::Buffer positions;          // [side² + 1, embed] f32
  Tensor pre_w, pre_b;                // [embed]
  std::vector<EncoderBlock> layers;   // the layers up to the selected hidden state
  kernels::PackedLinear proj1;        // [hidden, embed] (+ bias)
  kernels::PackedLinear proj2;        // [hidden, hidden] (+ bias)
  bool keep_cls = false;
  bool quick_gelu = true;
  int64_t text_hidden = 0;
};

ClipTower::ClipTower(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClipTower::~ClipTower() = default;

int64_t ClipTower::tokens_per_crop() const {
  const int64_t s = impl_->vc.side();
  return s * s + (impl_->keep_cls ? 1 : 0);
}

double ClipTower::flops(int64_t n_crops) const {
  const VisionConfig& v = impl_->vc;
  const double T = static_cast<double>(v.n_positions()), n = T * static_cast<double>(n_crops);
  const double e = static_cast<double>(v.hidden_size), m = static_cast<double>(v.intermediate_size);
  const double pd = static_cast<double>(v.num_channels * v.patch_size * v.patch_size);
  const double per_layer = 2 * n * (4 * e * e + 2 * e * m) + 4 * n * T * e;
  const double h = static_cast<double>(impl_->text_hidden);
  const double rows = static_cast<double>(tokens_per_crop() * n_crops);
  return 2 * n * e * pd + per_layer * static_cast<double>(impl_->layers.size()) +
         2 * rows * (e * h + h * h);
}

std::unique_ptr<ClipTower> ClipTower::load(const kernels::Backend& be, const io::SafeTensors& st,
                                           const Config& cfg, const EncoderPrecision& prec) {
  const kernels::WeightFormat fmt = prec.fmt;
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.vc = cfg.vision;
  m.be = &be;
  m.keep_cls = cfg.vision_feature_select_strategy == "full";
  m.quick_gelu = m.vc.hidden_act == "quick_gelu";
  m.text_hidden = cfg.text.hidden_size;
  const Naming naming = detect_naming(st.names(), st.path());
  // Compute-bound GEMMs over hundreds of rows per crop: the weights stay in the mapping where
  // they can (the fused q|k|v is packed into memory of its own).
  constexpr auto kPlace = kernels::WeightPlacement::kViewIfPossible;
  auto get = [&](const std::string& c) { return st.get(tensor_name(naming, c)); };
  auto lin = [&](const std::string& base, kernels::WeightFormat f, bool bias,
                 kernels::WeightPlacement place) {
    Tensor w = get(base + ".weight");
    if (!bias) return kernels::PackedLinear::pack(be, w, nullptr, f, place);
    Tensor b = get(base + ".bias");
    return kernels::PackedLinear::pack(be, w, &b, f, place);
  };
  const std::string vm = "vision_tower.vision_model.";
  Tensor pw = get(vm + "embeddings.patch_embedding.weight");  // [embed, C, p, p]
  m.patch_embed =
      kernels::PackedLinear::pack(be, pw.reshape({pw.dim(0), -1}), nullptr, fmt, kPlace);
  // The class token and the positions as f32 once, not at every image.
  const int64_t E = m.vc.hidden_size, T = m.vc.n_positions();
  m.positions = kernels::Buffer(be, T * E);
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  kernels::embedding(be, be.upload(get(vm + "embeddings.position_embedding.weight")), ids.data(), T,
                     m.positions.data());
  m.class_embedding = kernels::Buffer(be, E);
  const int32_t zero = 0;
  kernels::embedding(be, be.upload(get(vm + "embeddings.class_embedding").reshape({1, E})), &zero,
                     1, m.class_embedding.data());
  m.pre_w = be.upload(get(vm + "pre_layrnorm.weight"));
  m.pre_b = be.upload(get(vm + "pre_layrnorm.bias"));
  m.layers.resize(static_cast<size_t>(cfg.vision_layers_used()));
  const auto depth = static_cast<int64_t>(m.layers.size());  // the layers that run
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const kernels::WeightFormat f = prec.block_format(static_cast<int64_t>(i), depth);
    const std::string p = vm + "encoder.layers." + std::to_string(i) + ".";
    EncoderBlock& l = m.layers[i];
    l.ln1_w = be.upload(get(p + "layer_norm1.weight"));
    l.ln1_b = be.upload(get(p + "layer_norm1.bias"));
    l.ln2_w = be.upload(get(p + "layer_norm2.weight"));
    l.ln2_b = be.upload(get(p + "layer_norm2.bias"));
    Tensor w[3], b[3];
    const char* names[3] = {"q_proj", "k_proj", "v_proj"};
    for (int k = 0; k < 3; ++k) {
      w[k] = get(p + "self_attn." + names[k] + ".weight");
      b[k] = get(p + "self_attn." + names[k] + ".bias");
    }
    const Tensor* ws[3] = {&w[0], &w[1], &w[2]};
    const Tensor* bs[3] = {&b[0], &b[1], &b[2]};
    const kernels::WeightPlacement pl = prec.block_placement(static_cast<int64_t>(i), depth);
    l.qkv = kernels::PackedLinear::pack_concat(be, ws, bs, f, pl);
    l.proj = lin(p + "self_attn.out_proj", f, true, pl);
    l.fc1 = lin(p + "mlp.fc1", f, true, pl);
    l.fc2 = lin(p + "mlp.fc2", f, true, pl);
    l.opt = prec.block_options(static_cast<int64_t>(i), depth);
    l.bf16_attention = prec.bf16_attention();
    l.int8_attention = prec.int8_attention(static_cast<int64_t>(i), depth);
  }
  m.proj1 = lin("multi_modal_projector.linear_1", fmt, cfg.multimodal_projector_bias, kPlace);
  m.proj2 = lin("multi_modal_projector.linear_2", fmt, cfg.multimodal_projector_bias, kPlace);
  return std::unique_ptr<ClipTower>(new ClipTower(std::move(impl)));
}

// forward() as a job of one part per layer and a last one for the selection and the projector:
// the patch embedding, class token, positions and pre_layrnorm run with the first part.
class ClipTower::Job final : public BlockJob {
 public:
  Job(const Impl& m, const Tensor& pixel_values, int64_t tokens_per_crop)
      : BlockJob(static_cast<int64_t>(m.layers.size())), m_(m), per_(tokens_per_crop) {
    const VisionConfig& v = m.vc;
    const int64_t S = v.image_size, C = v.num_channels;
    if (pixel_values.dtype() != DType::kF32 || pixel_values.rank() != 4 ||
        pixel_values.dim(0) < 1 || pixel_values.dim(1) != C || pixel_values.dim(2) != S ||
        pixel_values.dim(3) != S)
      throw InvalidArgument("clip tower: pixel_values must be f32 [n_crops, " + std::to_string(C) +
                            ", " + std::to_string(S) + ", " + std::to_string(S) + "], got " +
                            pixel_values.describe());
    px_ = m.be->upload(pixel_values.contiguous());  // the features on the device
  }

 private:
  void begin() override {
    const kernels::Backend& be = *m_.be;
    const VisionConfig& v = m_.vc;
    const int64_t E = v.hidden_size, S = v.image_size, P = v.patch_size, C = v.num_channels;
    const int64_t side = v.side(), T = v.n_positions(), PD = C * P * P;
    const int64_t n_crops = px_.dim(0), N = n_crops * T;
    // Patch rows in (c, y, x) order, the conv weight's order; row 0 of each crop is the class
    // slot.
    kernels::Buffer patches(be, n_crops * side * side * PD);
    kernels::patchify_2d(be, px_.data<float>(), n_crops, C, S, P, patches.data());
    kernels::Buffer emb(be, n_crops * side * side * E);
    kernels::linear(be, patches.data(), n_crops * side * side, m_.patch_embed, emb.data());
    a_ = EncoderActivations(be, N, E, v.intermediate_size, false);
    float* x = a_.x.data();  // [N, embed]
    for (int64_t c = 0; c < n_crops; ++c) {
      float* row = x + c * T * E;
      kernels::copy2d(be, row, E, m_.class_embedding.data(), E, 1, E);
      kernels::copy2d(be, row + E, E, emb.data() + c * side * side * E, E, side * side, E);
      kernels::add(be, row, m_.positions.data(), T * E);
    }
    const float eps = static_cast<float>(v.layer_norm_eps);
    kernels::layer_norm(be, x, m_.pre_w, m_.pre_b, eps, x, N, E);
    cu_.resize(static_cast<size_t>(n_crops + 1));
    for (int64_t c = 0; c <= n_crops; ++c)
      cu_[static_cast<size_t>(c)] = static_cast<int32_t>(c * T);
    step_ = a_.step(static_cast<int32_t>(v.num_attention_heads), eps, m_.quick_gelu, cu_, nullptr);
  }
  void block(int64_t i) override {
    run_encoder_block(*m_.be, m_.layers[static_cast<size_t>(i)], step_);
  }
  // The selected hidden state, the class token dropped ("default"), through the projector.
  Tensor end() override {
    const kernels::Backend& be = *m_.be;
    const int64_t E = m_.vc.hidden_size, T = m_.vc.n_positions(), n_crops = px_.dim(0);
    const int64_t rows = n_crops * per_, skip = T - per_;
    kernels::Buffer sel(be, rows * E);
    for (int64_t c = 0; c < n_crops; ++c)
      kernels::copy2d(be, sel.data() + c * per_ * E, E, a_.x.data() + (c * T + skip) * E, E, per_,
                      E);
    const int64_t H = m_.text_hidden;
    kernels::Buffer mid(be, rows * H);
    kernels::linear(be, sel.data(), rows, m_.proj1, mid.data(),
                    kernels::LinearOptions{.act = kernels::LinearAct::kGeluErf});
    Tensor out = be.empty(DType::kF32, {rows, H});  // [n_crops * per, hidden]
    kernels::linear(be, mid.data(), rows, m_.proj2, out.data<float>());
    return out;
  }

  const Impl& m_;
  int64_t per_;
  Tensor px_;
  EncoderActivations a_;
  std::vector<int32_t> cu_;
  EncoderStep step_;
};

int64_t ClipTower::parts() const {
  return BlockJob::parts_for(static_cast<int64_t>(impl_->layers.size()));
}

std::unique_ptr<EncodeJob> ClipTower::begin(const Tensor& pixel_values) const {
  return std::make_unique<Job>(*impl_, pixel_values, tokens_per_crop());
}

Tensor ClipTower::forward(const Tensor& pixel_values) const {
  return begin(pixel_values)->run_rest();
}

}  // namespace mmrt::models::llava
