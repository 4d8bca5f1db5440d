// LLaVA tensor table (HF modeling_clip.py, modeling_llava(_next).py module layout).
#include "models/llava/weights_spec.h"

namespace mmrt::models::llava {

DecoderConfig decoder_config(const Config& cfg, Naming naming) {
  const TextConfig& t = cfg.text;
  DecoderConfig d;
  d.hidden_size = t.hidden_size;
  d.intermediate_size = t.intermediate_size;
  d.num_layers = t.num_hidden_layers;
  d.num_heads = t.num_attention_heads;
  d.num_kv_heads = t.num_key_value_heads;
  d.head_dim = t.num_attention_heads > 0 ? t.heads_dim() : 0;
  d.vocab_size = t.vocab_size;
  d.rms_norm_eps = t.rms_norm_eps;
  d.rope_theta = t.rope_theta;
  d.qkv_bias = false;
  d.tied_embeddings = t.tie_word_embeddings;
  d.tensor_name = [naming](const std::string& canonical) { return tensor_name(naming, canonical); };
  return d;
}

std::vector<ExpectedTensor> expected_tensors(const Config& cfg, bool tied, bool all_layers) {
  const VisionConfig& v = cfg.vision;
  std::vector<ExpectedTensor> out;
  DecoderConfig d = decoder_config(cfg, Naming::kOld);
  d.tied_embeddings = tied;
  for (const DecoderTensor& t : decoder_tensors(d)) out.push_back({t.canonical_name, t.shape});
  auto add = [&](std::string name, Shape shape) {
    out.push_back({std::move(name), std::move(shape)});
  };
  const int64_t E = v.hidden_size, M = v.intermediate_size, H = cfg.text.hidden_size;
  const std::string vm = "vision_tower.vision_model.";
  add(vm + "embeddings.class_embedding", {E});
  add(vm + "embeddings.patch_embedding.weight", {E, v.num_channels, v.patch_size, v.patch_size});
  add(vm + "embeddings.position_embedding.weight", {v.n_positions(), E});
  add(vm + "pre_layrnorm.weight", {E});
  add(vm + "pre_layrnorm.bias", {E});
  const int64_t layers = all_layers ? v.num_hidden_layers : cfg.vision_layers_used();
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = vm + "encoder.layers." + std::to_string(i) + ".";
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      add(p + "self_attn." + proj + ".weight", {E, E});
      add(p + "self_attn." + proj + ".bias", {E});
    }
    for (const char* ln : {"layer_norm1", "layer_norm2"}) {
      add(p + ln + ".weight", {E});
      add(p + ln + ".bias", {E});
    }
    add(p + "mlp.fc1.weight", {M, E});
    add(p + "mlp.fc1.bias", {M});
    add(p + "mlp.fc2.weight", {E, M});
    add(p + "mlp.fc2.bias", {E});
  }
  if (all_layers) {
    add(vm + "post_layernorm.weight", {E});
    add(vm + "post_layernorm.bias", {E});
  }
  add("multi_modal_projector.linear_1.weight", {H, E});
  if (cfg.multimodal_projector_bias) add("multi_modal_projector.linear_1.bias", {H});
  add("multi_modal_projector.linear_2.weight", {H, H});
  if (cfg.multimodal_projector_bias) add("multi_modal_projector.linear_2.bias", {H});
  if (cfg.next) add("image_newline", {H});
  return out;
}

bool is_norm_param(const std::string& n) {
  for (const char* key :
       {"layernorm.", "layrnorm.", ".layer_norm1.", ".layer_norm2.", "model.norm."})
    if (n.find(key) != std::string::npos) return true;
  return false;
}

Layout check_checkpoint(const io::SafeTensors& st, const Config& cfg) {
  Layout l;
  l.naming = detect_naming(st.names(), st.path());
  l.tied = !st.contains(tensor_name(l.naming, "lm_head.weight"));
  std::vector<ExpectedTensor> expected = expected_tensors(cfg, l.tied);
  for (ExpectedTensor& e : expected) e.name = tensor_name(l.naming, e.name);
  check_checkpoint_tensors(st, expected,
                           std::string(l.naming == Naming::kOld ? "old" : "new") +
                               "-style names, " + (l.tied ? "tied" : "untied") + " lm_head");
  return l;
}

}  // namespace mmrt::models::llava
