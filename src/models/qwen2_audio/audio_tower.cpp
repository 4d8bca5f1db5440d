#include "models/qwen2_audio/audio_tower.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "kernels/attention.h"
#include "kernels/layout.h"
#include "kernels/ops.h"
#include "kernels/scratch.h"
#include "models/qwen2_audio/feature_extractor.h"

namespace mmrt::models::qwen2_audio {

namespace {

constexpr float kLayerNormEps = 1e-5f;

struct Layer {
  Tensor ln1_w, ln1_b, ln2_w, ln2_b;  // [d_model]
  kernels::PackedLinear qkv;          // [3 * d_model, d_model]: q (bias) | k (no bias) | v (bias)
  kernels::PackedLinear out;          // [d_model, d_model] + bias
  kernels::PackedLinear fc1;          // [ffn, d_model] + bias
  kernels::PackedLinear fc2;          // [d_model, ffn] + bias
  kernels::LinearOptions opt;         // for all four (EncoderPrecision::block_options)
  bool bf16_attention = false;        // VarlenAttentionArgs::bf16 (a 16-bit encoder)
};

// Bidirectional attention of R query rows over the first V key rows (V <= R) of a fused
// qkv buffer [R, 3 * H * hd]: out [R, H * hd]. The kernel takes equal query and key segments
// with head_dim a multiple of 16, so when R > V or head_dim is not such a multiple the heads are
// zero-padded to a multiple of 16 (the dot products and the first hd output dims unchanged) and
// the V keys repeated under every V-row block of queries, one segment per block. bf16: the
// products in bf16 where the backend has them (VarlenAttentionArgs::bf16).
void key_masked_attention(const kernels::Backend& be, const float* qkv, int64_t R, int64_t V,
                          int64_t H, int64_t hd, float* out, bool bf16) {
  const int64_t E = H * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  kernels::VarlenAttentionArgs va;
  va.bf16 = bf16;
  va.n_heads = va.n_kv_heads = static_cast<int32_t>(H);
  va.mask = kernels::MaskKind::kFull;
  va.scale = scale;
  if (hd % 16 == 0 && R == V) {
    const int32_t cu[2] = {0, static_cast<int32_t>(R)};
    va.q = qkv;
    va.k = qkv + E;
    va.v = qkv + 2 * E;
    va.out = out;
    va.q_stride = va.k_stride = va.v_stride = 3 * E;
    va.cu_seqlens = cu;
    va.head_dim = static_cast<int32_t>(hd);
    kernels::varlen_attention(be, va);
    return;
  }
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
  va.cu_seqlens = cu;
  va.head_dim = static_cast<int32_t>(hdp);
  kernels::varlen_attention(be, va);
  for (int64_t h = 0; h < H; ++h)
    kernels::copy2d(be, out + h * hd, E, o.data() + h * hdp, row, R, hd);
}

}  // namespace

struct AudioTower::Impl {
  const kernels::Backend* be = nullptr;
  AudioConfig ac;
  int64_t hidden = 0;                  // text hidden size (projector output)
  kernels::PackedLinear conv1, conv2;  // [d, n_mels * 3], [d, d * 3] (+ bias)
  Tensor positions;                    // f32 [max_source_positions, d]
  std::vector<Layer> layers;
  Tensor ln_w, ln_b;                // final layer_norm [d]
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
    Layer& l = m.layers[static_cast<size_t>(i)];
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
    l.out = lin(p + "self_attn.out_proj", f, pl);
    l.fc1 = lin(p + "fc1", f, pl);
    l.fc2 = lin(p + "fc2", f, pl);
    l.opt = prec.block_options(i, m.ac.encoder_layers);
    l.bf16_attention = prec.bf16_attention();
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

Tensor AudioTower::forward(std::span<const float> mel, int64_t valid_frames) const {
  return run(mel, valid_frames, false);
}

Tensor AudioTower::forward_all(std::span<const float> mel, int64_t valid_frames) const {
  if (valid_frames < 1)
    throw InvalidArgument("audio tower: every row needs at least one valid mel frame");
  return run(mel, valid_frames, true);
}

Tensor AudioTower::run(std::span<const float> mel, int64_t L, bool all_rows) const {
  const Impl& m = *impl_;
  const kernels::Backend& be = *m.be;
  const AudioConfig& a = m.ac;
  const int64_t C = a.num_mel_bins, T = a.n_frames(), D = a.d_model, F = a.encoder_ffn_dim;
  const int64_t H = a.encoder_attention_heads;
  if (static_cast<int64_t>(mel.size()) != C * T)
    throw InvalidArgument("audio tower: a window must be [" + std::to_string(C) + ", " +
                          std::to_string(T) + "] mel values, got " + std::to_string(mel.size()));
  if (L < 0 || L > T)
    throw InvalidArgument("audio tower: valid mel frames " + std::to_string(L) + " outside [0, " +
                          std::to_string(T) + "]");
  // V keys are unmasked; R rows are computed (V, or all of them).
  const int64_t V = L > 0 ? (L - 1) / 2 + 1 : 0;
  const int64_t R = all_rows ? a.max_source_positions : V;
  const int64_t P = R / 2;                            // pooled rows
  Tensor out = be.empty(DType::kF32, {P, m.hidden});  // [P, hidden]
  if (P == 0) return out;

  // conv1 over the 2R frames conv2 reads (frames t-1, t, t+1; zero outside [0, T)), then GELU.
  const int64_t C1 = 2 * R;
  kernels::Buffer cols(be, std::max(C1 * C * 3, R * D * 3));
  kernels::im2col_1d(
      be, mel.data(),
      {.channels = C, .t_in = T, .c_stride = T, .t_stride = 1, .k = 3, .pad = 1, .t_out = C1},
      cols.data());
  kernels::Buffer y1(be, C1 * D);  // [2R, d]
  kernels::linear(be, cols.data(), C1, m.conv1, y1.data());
  kernels::gelu_erf(be, y1.data(), y1.data(), C1 * D);
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
  kernels::Buffer x(be, R * D), h(be, R * D), tmp(be, R * D);  // [R, d]
  kernels::linear(be, cols.data(), R, m.conv2, x.data());
  kernels::gelu_erf(be, x.data(), x.data(), R * D);
  kernels::add(be, x.data(), m.positions.data<float>(), R * D);

  kernels::Buffer qkv(be, R * 3 * D);  // [R, 3d]
  kernels::Buffer act(be, R * F);      // [R, ffn]
  for (const Layer& l : m.layers) {
    kernels::layer_norm(be, x.data(), l.ln1_w, l.ln1_b, kLayerNormEps, h.data(), R, D);
    kernels::linear(be, h.data(), R, l.qkv, qkv.data(), l.opt);
    key_masked_attention(be, qkv.data(), R, V, H, a.head_dim(), h.data(), l.bf16_attention);
    kernels::linear(be, h.data(), R, l.out, tmp.data(), l.opt);
    kernels::add(be, x.data(), tmp.data(), R * D);
    kernels::layer_norm(be, x.data(), l.ln2_w, l.ln2_b, kLayerNormEps, h.data(), R, D);
    kernels::linear(be, h.data(), R, l.fc1, act.data(), l.opt);
    kernels::gelu_erf(be, act.data(), act.data(), R * F);
    kernels::linear(be, act.data(), R, l.fc2, tmp.data(), l.opt);
    kernels::add(be, x.data(), tmp.data(), R * D);
  }
  // AvgPool1d(2, 2) over time, then the final LayerNorm, then the projector.
  for (int64_t i = 0; i < P; ++i) {
    const float* r0 = x.data() + 2 * i * D;
    float* dst = h.data() + i * D;
    for (int64_t c = 0; c < D; ++c) dst[c] = (r0[c] + r0[D + c]) * 0.5f;
  }
  kernels::layer_norm(be, h.data(), m.ln_w, m.ln_b, kLayerNormEps, tmp.data(), P, D);
  kernels::linear(be, tmp.data(), P, m.projector, out.data<float>());
  return out;
}

}  // namespace mmrt::models::qwen2_audio
