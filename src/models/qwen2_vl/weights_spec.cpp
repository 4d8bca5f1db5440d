// Qwen2-VL tensor table (HF modeling_qwen2_vl.py module layout) and the checkpoint checker.
#include "models/qwen2_vl/weights_spec.h"

namespace mmrt::models::qwen2_vl {

DecoderConfig decoder_config(const Config& cfg, Naming naming) {
  const TextConfig& t = cfg.text;
  DecoderConfig d;
  d.hidden_size = t.hidden_size;
  d.intermediate_size = t.intermediate_size;
  d.num_layers = t.num_hidden_layers;
  d.num_heads = t.num_attention_heads;
  d.num_kv_heads = t.num_key_value_heads;
  d.head_dim = t.num_attention_heads > 0 ? t.head_dim() : 0;
  d.vocab_size = t.vocab_size;
  d.rms_norm_eps = t.rms_norm_eps;
  d.rope_theta = t.rope_theta;
  if (!t.mrope_section.empty()) {
    d.rotary = RotaryKind::kMrope;
    d.mrope_section.assign(t.mrope_section.begin(), t.mrope_section.end());
  }
  d.qkv_bias = true;
  d.tied_embeddings = t.tie_word_embeddings;
  d.tensor_name = [naming](const std::string& canonical) { return tensor_name(naming, canonical); };
  return d;
}

std::vector<ExpectedTensor> text_tensors(const Config& cfg, bool tied) {
  std::vector<ExpectedTensor> out;
  DecoderConfig d = decoder_config(cfg, Naming::kOld);
  d.tied_embeddings = tied;
  for (const DecoderTensor& t : decoder_tensors(d)) out.push_back({t.canonical_name, t.shape});
  return out;
}

std::vector<ExpectedTensor> expected_tensors(const Config& cfg, bool tied) {
  const VisionConfig& v = cfg.vision;
  std::vector<ExpectedTensor> out = text_tensors(cfg, tied);
  auto add = [&](std::string name, Shape shape) {
    out.push_back({std::move(name), std::move(shape)});
  };
  const int64_t E = v.embed_dim, M = v.mlp_hidden();
  const int64_t merged = E * v.spatial_merge_size * v.spatial_merge_size;  // 2x2 tokens -> one
  add("visual.patch_embed.proj.weight",
      {E, v.in_chans, v.temporal_patch_size, v.patch_size, v.patch_size});
  for (int64_t b = 0; b < v.depth; ++b) {
    const std::string p = "visual.blocks." + std::to_string(b) + ".";
    add(p + "norm1.weight", {E});
    add(p + "norm1.bias", {E});
    add(p + "norm2.weight", {E});
    add(p + "norm2.bias", {E});
    add(p + "attn.qkv.weight", {3 * E, E});
    add(p + "attn.qkv.bias", {3 * E});
    add(p + "attn.proj.weight", {E, E});
    add(p + "attn.proj.bias", {E});
    add(p + "mlp.fc1.weight", {M, E});
    add(p + "mlp.fc1.bias", {M});
    add(p + "mlp.fc2.weight", {E, M});
    add(p + "mlp.fc2.bias", {E});
  }
  add("visual.merger.ln_q.weight", {E});
  add("visual.merger.ln_q.bias", {E});
  add("visual.merger.mlp.0.weight", {merged, merged});
  add("visual.merger.mlp.0.bias", {merged});
  add("visual.merger.mlp.2.weight", {v.hidden_size, merged});
  add("visual.merger.mlp.2.bias", {v.hidden_size});
  return out;
}

bool is_norm_param(const std::string& n) {
  for (const char* key : {"layernorm.", ".norm1.", ".norm2.", "model.norm.", ".ln_q."})
    if (n.find(key) != std::string::npos) return true;
  return false;
}

Layout check_checkpoint(const io::SafeTensors& st, const Config& cfg) {
  return check_checkpoint(st, [&](bool tied) { return expected_tensors(cfg, tied); });
}

Layout check_checkpoint(const io::SafeTensors& st,
                        const std::function<std::vector<ExpectedTensor>(bool tied)>& expected_of) {
  Layout l;
  l.naming = detect_naming(st.names(), st.path());
  l.tied = !st.contains("lm_head.weight");
  std::vector<ExpectedTensor> expected = expected_of(l.tied);
  for (ExpectedTensor& e : expected) e.name = tensor_name(l.naming, e.name);
  check_checkpoint_tensors(st, expected,
                           std::string(l.naming == Naming::kOld ? "old" : "new") +
                               "-style names, " + (l.tied ? "tied" : "untied") + " lm_head");
  return l;
}

}  // namespace mmrt::models::qwen2_vl
