#include "models/qwen2_audio/audio_tower.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "kernels/layout.h"
#include "kernels/ops.h"
#include "kernels/scratch.h"
#include "models/qwen2_audio/feature_extractor.h"

namespace mmrt::models::qwen2_audio {

namespace {

constexpr float kLayerNormEps = 1e-5f;

}  // namespace

struct AudioTower::Impl {
  const kernels::Backend* be = nullptr;
  AudioConfig ac;
  int64_t hidden = 0;                  // text hidden size (projector output)
  kernels::PackedLinear conv1, conv2;  // [d, n_mels * 3], [d, d * 3] (+ bias)
  Tensor positions;                    // f32 [max_source_positions, d]
  std::vector<EncoderBlock>
      layers;         // self_attn_layer_norm, q|k|v, out_proj, final_layer_norm, fc1, fc2
  Tensor ln_w, ln_b;  // final layer_norm [d]
  kernels::PackedLinear projector;  // [hidden, d] + bias
};

AudioTower::AudioTower(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AudioTower::~AudioTower() = default;

int64_t AudioTower::n_mels() const {
  return impl_->ac.num_mel_bins;
}
int64_t AudioTower::n_frames() const {
  return impl_->ac.n_frames();
}
int64_t AudioTower::out_hidden() const {
  return impl_->hidden;
}

std::unique_ptr<AudioTower> AudioTower::load(const kernels::Backend& be, const io::SafeTensors& st,
                                             const Config& cfg, const EncoderPrecision& prec) {
  const kernels::WeightFormat fmt = prec.fmt;
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.be = &be;
  m.ac = cfg.audio;
  m.hidden = cfg.text.hidden_size;
  // GEMMs over up to 1500 rows (compute-bound): the weights stay in the mapped checkpoint.
  constexpr auto kPlace = kernels::WeightPlacement::kViewIfPossible;
  auto get = [&](const std::string& name) { return st.get(name); };
  auto lin = [&](const std::string& base, kernels::WeightFormat f, kernels::WeightPlacement place) {
    Tensor w = get(base + ".weight"), b = get(base + ".bias");
    return kernels::PackedLinear::pack(be, w, &b, f, place);
  };
  // Conv1d weights [out, in, k] flattened to [out, in * k]: column c * 3 + k, the im2col order.
  auto conv = [&](const std::string& base) {
    Tensor w = get(base + ".weight"), b = get(base + ".bias");
    Tensor flat = w.contiguous().reshape({w.dim(0), w.dim(1) * w.dim(2)});
    return kernels::PackedLinear::pack(be, flat, &b, fmt, kPlace);
  };
  m.conv1 = conv("audio_tower.conv1");
  m.conv2 = conv("audio_tower.conv2");
  m.positions = be.upload(get("audio_tower.embed_positions.weight").to(DType::kF32));
  m.layers.resize(static_cast<size_t>(m.ac.encoder_layers));
  for (int64_t i = 0; i < m.ac.encoder_layers; ++i) {
    const std::string p = "audio_tower.layers." + std::to_string(i) + ".";
    EncoderBlock& l = m.layers[static_cast<size_t>(i)];
    l.ln1_w = be.upload(get(p + "self_attn_layer_norm.weight"));
    l.ln1_b = be.upload(get(p + "self_attn_layer_norm.bias"));
    l.ln2_w = be.upload(get(p + "final_layer_norm.weight"));
    l.ln2_b = be.upload(get(p + "final_layer_norm.bias"));
    Tensor qw = get(p + "self_attn.q_proj.weight"), kw = get(p + "self_attn.k_proj.weight"),
           vw = get(p + "self_attn.v_proj.weight");
    Tensor qb = get(p + "self_attn.q_proj.bias"), vb = get(p + "self_attn.v_proj.bias");
    const Tensor* ws[] = {&qw, &kw, &vw};
    const Tensor* bs[] = {&qb, nullptr, &vb};  // k_proj has no bias
    const kernels::WeightFormat f = prec.block_format(i, m.ac.encoder_layers);
    const kernels::WeightPlacement pl = prec.block_placement(i, m.ac.encoder_layers);
    l.qkv = kernels::PackedLinear::pack_concat(be, ws, bs, f, pl);
    l.proj = lin(p + "self_attn.out_proj", f, pl);
    l.fc1 = lin(p + "fc1", f, pl);
    l.fc2 = lin(p + "fc2", f, pl);
    l.opt = prec.block_options(i, m.ac.encoder_layers);
    l.bf16_attention = prec.bf16_attention();
    l.int8_attention = prec.int8_attention(i, m.ac.encoder_layers);
  }
  m.ln_w = be.upload(get("audio_tower.layer_norm.weight"));
  m.ln_b = be.upload(get("audio_tower.layer_norm.bias"));
  m.projector = lin("multi_modal_projector.linear", fmt, kPlace);
  return std::unique_ptr<AudioTower>(new AudioTower(std::move(impl)));
}

double AudioTower::flops(int64_t valid_frames) const {
  const AudioConfig& a = impl_->ac;
  const double V = static_cast<double>(valid_frames > 0 ? (valid_frames - 1) / 2 + 1 : 0);
  const double d = static_cast<double>(a.d_model), f = static_cast<double>(a.encoder_ffn_dim);
  const double conv = 2 * (2 * V) * d * 3 * static_cast<double>(a.num_mel_bins) + 2 * V * d * 3 * d;
  const double layer = 2 * V * (4 * d * d + 2 * d * f) + 4 * V * V * d;
  return conv + layer * static_cast<double>(a.encoder_layers) +
         2 * std::floor(V / 2) * d * static_cast<double>(impl_->hidden);
}

// One window as a job of one part per layer and a last one for the pooling, final LayerNorm and
// projector: the conv front end runs with the first part. A window of no tokens runs nothing.
class AudioTower::Job final : public BlockJob {
 public:
  Job(const Impl& m, std::span<const float> mel, int64_t L, bool all_rows)
      : BlockJob(static_cast<int64_t>(m.layers.size())), m_(m), mel_(mel) {
    const AudioConfig& a = m.ac;
    const int64_t C = a.num_mel_bins, T = a.n_frames();
    if (static_cast<int64_t>(mel.size()) != C * T)
      throw InvalidArgument("audio tower: a window must be [" + std::to_string(C) + ", " +
                            std::to_string(T) + "] mel values, got " + std::to_string(mel.size()));
    if (L < 0 || L > T)
      throw InvalidArgument("audio tower: valid mel frames " + std::to_string(L) + " outside [0, " +
                            std::to_string(T) + "]");
    // V keys are unmasked; R rows are computed (V, or all of them).
    V_ = L > 0 ? (L - 1) / 2 + 1 : 0;
    R_ = all_rows ? a.max_source_positions : V_;
    P_ = R_ / 2;  // pooled rows
  }

 private:
  void begin() override {
    if (P_ == 0) return;
    const kernels::Backend& be = *m_.be;
    const AudioConfig& a = m_.ac;
    const int64_t C = a.num_mel_bins, T = a.n_frames(), D = a.d_model, R = R_;
    // conv1 over the 2R frames conv2 reads (frames t-1, t, t+1; zero outside [0, T)), then GELU.
    const int64_t C1 = 2 * R;
    kernels::Buffer cols(be, std::max(C1 * C * 3, R * D * 3));
    kernels::im2col_1d(
        be, mel_.data(),
        {.channels = C, .t_in = T, .c_stride = T, .t_stride = 1, .k = 3, .pad = 1, .t_out = C1},
        cols.data());
    kernels::Buffer y1(be, C1 * D);  // [2R, d]
    const kernels::LinearOptions gelu{.act = kernels::LinearAct::kGeluErf};
    kernels::linear(be, cols.data(), C1, m_.conv1, y1.data(), gelu);
    // conv2 (stride 2): row t reads conv1 rows 2t-1, 2t, 2t+1 (row -1 is zero padding).
    kernels::im2col_1d(be, y1.data(),
                       {.channels = D,
                        .t_in = C1,
                        .c_stride = 1,
                        .t_stride = D,
                        .k = 3,
                        .stride = 2,
                        .pad = 1,
                        .t_out = R},
                       cols.data());
    a_ = EncoderActivations(be, R, D, a.encoder_ffn_dim, false);
    float* x = a_.x.data();  // [R, d]
    kernels::linear(be, cols.data(), R, m_.conv2, x, gelu);
    kernels::add(be, x, m_.positions.data<float>(), R * D);
    cu_[1] = static_cast<int32_t>(R);
    step_ = a_.step(static_cast<int32_t>(a.encoder_attention_heads), kLayerNormEps, false, cu_,
                    nullptr);
    step_.keys = V_;
  }
  void block(int64_t i) override {
    if (P_ > 0) run_encoder_block(*m_.be, m_.layers[static_cast<size_t>(i)], step_);
  }
  // AvgPool1d(2, 2) over time, then the final LayerNorm, then the projector.
  Tensor end() override {
    const kernels::Backend& be = *m_.be;
    Tensor out = be.empty(DType::kF32, {P_, m_.hidden});  // [P, hidden]
    if (P_ == 0) return out;
    const int64_t D = m_.ac.d_model;
    float *h = a_.h.data(), *pooled = a_.attn.data();
    for (int64_t i = 0; i < P_; ++i) {
      const float* r0 = a_.x.data() + 2 * i * D;
      float* dst = h + i * D;
      for (int64_t c = 0; c < D; ++c) dst[c] = (r0[c] + r0[D + c]) * 0.5f;
    }
    kernels::layer_norm(be, h, m_.ln_w, m_.ln_b, kLayerNormEps, pooled, P_, D);
    kernels::linear(be, pooled, P_, m_.projector, out.data<float>());
    return out;
  }

  const Impl& m_;
  std::span<const float> mel_;
  int64_t V_ = 0, R_ = 0, P_ = 0;
  EncoderActivations a_;
  int32_t cu_[2] = {0, 0};
  EncoderStep step_;
};

int64_t AudioTower::parts() const {
  return BlockJob::parts_for(static_cast<int64_t>(impl_->layers.size()));
}

std::unique_ptr<EncodeJob> AudioTower::begin(std::span<const float> mel,
                                             int64_t valid_frames) const {
  return std::make_unique<Job>(*impl_, mel, valid_frames, false);
}

Tensor AudioTower::forward(std::span<const float> mel, int64_t valid_frames) const {
  return run(mel, valid_frames, false);
}

Tensor AudioTower::forward_all(std::span<const float> mel, int64_t valid_frames) const {
  if (valid_frames < 1)
    throw InvalidArgument("audio tower: every row needs at least one valid mel frame");
  return run(mel, valid_frames, true);
}

Tensor AudioTower::run(std::span<const float> mel, int64_t L, bool all_rows) const {
  return Job(*impl_, mel, L, all_rows).run_rest();
}

}  // namespace mmrt::models::qwen2_audio
