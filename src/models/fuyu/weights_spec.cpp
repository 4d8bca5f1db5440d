// Fuyu's tensor table: the names in both conventions, the Persimmon decoder settings, and the
// checker every loader and `mmrt inspect` runs.
#include "models/fuyu/weights_spec.h"

#include "core/error.h"

namespace mmrt::models::fuyu {

std::string tensor_name(Naming naming, const std::string& canonical) {
  if (canonical.rfind("vision_embed_tokens.", 0) == 0)
    return naming == Naming::kOld ? canonical : "model." + canonical;
  if (canonical == "lm_head.weight")
    return naming == Naming::kOld ? "language_model.lm_head.weight" : canonical;
  static const std::pair<const char*, const char*> kMap[] = {
      {"self_attn.qkv_proj.", "self_attn.query_key_value."},
      {"self_attn.o_proj.", "self_attn.dense."},
      {"self_attn.q_norm.", "self_attn.q_layernorm."},
      {"self_attn.k_norm.", "self_attn.k_layernorm."},
      {"mlp.up_proj.", "mlp.dense_h_to_4h."},
      {"mlp.down_proj.", "mlp.dense_4h_to_h."},
      {"model.norm.", "model.final_layernorm."}};
  std::string n = canonical;
  for (const auto& [from, to] : kMap)
    if (const size_t at = n.find(from); at != std::string::npos) {
      n.replace(at, std::string(from).size(), to);
      break;
    }
  // n starts with "model.": the decoder's own prefix.
  return naming == Naming::kOld ? "language_model." + n : "model.language_model." + n.substr(6);
}

DecoderConfig decoder_config(const Config& cfg, Naming naming) {
  const TextConfig& t = cfg.text;
  DecoderConfig d;
  d.hidden_size = t.hidden_size;
  d.intermediate_size = t.intermediate_size;
  d.num_layers = t.num_hidden_layers;
  d.num_heads = t.num_attention_heads;
  d.num_kv_heads = t.num_attention_heads;
  d.head_dim = t.num_attention_heads > 0 ? t.head_dim() : 0;
  d.vocab_size = t.vocab_size;
  d.rms_norm_eps = t.layer_norm_eps;
  d.rope_theta = t.rope_theta;
  d.rotary = RotaryKind::kPartial;
  d.rotary_dim = t.num_attention_heads > 0 ? t.rotary_dim() : 0;
  d.norm = NormKind::kLayer;
  d.mlp = MlpKind::kRelu2;
  d.fused_qkv = true;
  d.qkv_bias = d.o_bias = d.mlp_bias = true;
  d.qk_norm = t.qk_layernorm;
  d.tied_embeddings = t.tie_word_embeddings;
  d.tensor_name = [naming](const std::string& c) { return tensor_name(naming, c); };
  return d;
}

std::vector<ExpectedTensor> expected_tensors(const Config& cfg, bool tied) {
  DecoderConfig d = decoder_config(cfg, Naming::kOld);
  d.tied_embeddings = tied;
  std::vector<ExpectedTensor> out;
  for (const DecoderTensor& t : decoder_tensors(d)) out.push_back({t.canonical_name, t.shape});
  out.push_back({"vision_embed_tokens.weight", {cfg.hidden_size, cfg.patch_dim()}});
  out.push_back({"vision_embed_tokens.bias", {cfg.hidden_size}});
  return out;
}

bool is_norm_param(const std::string& n) {
  for (const char* key : {"layernorm.", ".q_norm.", ".k_norm.", "model.norm."})
    if (n.find(key) != std::string::npos) return true;
  return false;
}

Layout check_checkpoint(const io::SafeTensors& st, const Config& cfg) {
  Layout l;
  bool old_style = false, new_style = false;
  for (const std::string& n : st.names()) {
    old_style |= n.rfind("language_model.model.", 0) == 0;
    new_style |= n.rfind("model.language_model.", 0) == 0;
  }
  if (old_style == new_style)
    throw FormatError(st.path() + (old_style ? ": mixes" : ": has neither") +
                      " the old (language_model.model.*) and the new (model.language_model.*) " +
                      "Fuyu tensor names");
  l.naming = old_style ? Naming::kOld : Naming::kNew;
  l.tied = !st.contains(tensor_name(l.naming, "lm_head.weight"));
  std::vector<ExpectedTensor> expected = expected_tensors(cfg, l.tied);
  for (ExpectedTensor& e : expected) e.name = tensor_name(l.naming, e.name);
  check_checkpoint_tensors(st, expected,
                           std::string(l.naming == Naming::kOld ? "old" : "new") +
                               "-style names, " + (l.tied ? "tied" : "untied") + " lm_head");
  return l;
}

}  // namespace mmrt::models::fuyu
