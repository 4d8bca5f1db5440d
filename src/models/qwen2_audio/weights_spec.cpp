// Qwen2-Audio tensor table (HF modeling_qwen2_audio.py module layout) and the checkpoint checker.
#include "models/qwen2_audio/weights_spec.h"

#include <algorithm>

namespace mmrt::models::qwen2_audio {

DecoderConfig decoder_config(const Config& cfg) {
  const TextConfig& t = cfg.text;
  return DecoderConfig{
      .hidden_size = t.hidden_size,
      .intermediate_size = t.intermediate_size,
      .num_layers = t.num_hidden_layers,
      .num_heads = t.num_attention_heads,
      .num_kv_heads = t.num_key_value_heads,
      .head_dim = t.num_attention_heads > 0 ? t.hidden_size / t.num_attention_heads : 0,
      .vocab_size = t.vocab_size,
      .rms_norm_eps = t.rms_norm_eps,
      .rope_theta = t.rope_theta,
      .rotary = RotaryKind::k1D,
      .qkv_bias = true,
      .tied_embeddings = t.tie_word_embeddings,
      .tensor_name = &tensor_name,
  };
}

std::vector<ExpectedTensor> expected_tensors(const Config& cfg, bool tied) {
  DecoderConfig lm = decoder_config(cfg);
  lm.tied_embeddings = tied;
  const std::vector<DecoderTensor> text = decoder_tensors(lm);
  std::vector<ExpectedTensor> out(text.size());
  std::transform(text.begin(), text.end(), out.begin(), [](const DecoderTensor& t) {
    return ExpectedTensor{t.canonical_name, t.shape};
  });
  const AudioConfig& a = cfg.audio;
  const int64_t D = a.d_model, F = a.encoder_ffn_dim;
  auto add = [&out](const std::string& name, const Shape& shape) { out.push_back({name, shape}); };
  auto norm = [&](const std::string& base) {
    add(base + ".weight", {D});
    add(base + ".bias", {D});
  };
  add("audio_tower.conv1.weight", {D, a.num_mel_bins, 3});
  add("audio_tower.conv1.bias", {D});
  add("audio_tower.conv2.weight", {D, D, 3});
  add("audio_tower.conv2.bias", {D});
  add("audio_tower.embed_positions.weight", {a.max_source_positions, D});
  for (int64_t i = 0; i < a.encoder_layers; ++i) {
    const std::string p = "audio_tower.layers." + std::to_string(i) + ".";
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      add(p + "self_attn." + proj + ".weight", {D, D});
      if (std::string(proj) != "k_proj") add(p + "self_attn." + proj + ".bias", {D});
    }
    norm(p + "self_attn_layer_norm");
    add(p + "fc1.weight", {F, D});
    add(p + "fc1.bias", {F});
    add(p + "fc2.weight", {D, F});
    add(p + "fc2.bias", {D});
    norm(p + "final_layer_norm");
  }
  norm("audio_tower.layer_norm");
  add("multi_modal_projector.linear.weight", {cfg.text.hidden_size, D});
  add("multi_modal_projector.linear.bias", {cfg.text.hidden_size});
  return out;
}

bool is_norm_param(const std::string& n) {
  for (const char* key : {"layernorm.", "layer_norm.", "model.norm."})
    if (n.find(key) != std::string::npos) return true;
  return false;
}

Layout check_checkpoint(const io::SafeTensors& st, const Config& cfg) {
  Layout l;
  l.tied = !st.contains(tensor_name("lm_head.weight"));
  std::vector<ExpectedTensor> expected = expected_tensors(cfg, l.tied);
  for (ExpectedTensor& e : expected) e.name = tensor_name(e.name);
  check_checkpoint_tensors(
      st, expected, std::string("Qwen2-Audio names, ") + (l.tied ? "tied" : "untied") + " lm_head");
  return l;
}

}  // namespace mmrt::models::qwen2_audio
