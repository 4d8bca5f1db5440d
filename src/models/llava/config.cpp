// LLaVA config.json: parsing with the transformers class defaults, validation, writing.
#include "models/llava/config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_fields.h"

namespace mmrt::models::llava {

using nlohmann::json;

namespace {

constexpr const char* kNextArch = "LlavaNextForConditionalGeneration";
constexpr const char* kArch = "LlavaForConditionalGeneration";

const json* sub_object(const json& root, const char* key, const std::string& origin) {
  if (!root.contains(key) || root[key].is_null()) return nullptr;
  if (!root[key].is_object())
    throw FormatError(origin + ": field \"" + key + "\" must be an object, got " +
                      io::json_excerpt(root[key]));
  return &root[key];
}

// The class defaults of the text model (LlamaConfig unless model_type says "mistral").
TextConfig text_defaults(const std::string& model_type) {
  TextConfig t;
  t.model_type = model_type;
  if (model_type == "mistral") {
    t.intermediate_size = 14336;
    t.num_key_value_heads = 8;
    t.max_position_embeddings = 4096 * 32;
    t.sliding_window = 4096;
  }
  return t;
}

TextConfig parse_text(const json* tc, const std::string& origin) {
  if (!tc) return text_defaults("llama");
  io::JsonFields f(tc, nullptr, "text_config.", origin);
  const std::string type = f.str_or("model_type", "llama");
  if (type != "llama" && type != "mistral")
    throw Unimplemented(origin + ": text_config.model_type \"" + type +
                        "\" is not supported (llama or mistral)");
  TextConfig t = text_defaults(type);
  // LlamaConfig: absent (or null) key/value heads mean plain multi-head attention.
  read_text_fields(f, t, {.kv_default_is_heads = type == "llama"});
  if (const json* hd = f.find("head_dim"); hd && !hd->is_null()) t.head_dim = f.req_int("head_dim");
  if (const json* sw = f.find("sliding_window"))
    t.sliding_window = sw->is_null() ? 0 : f.req_int("sliding_window");
  t.rms_norm_eps = f.num_or("rms_norm_eps", t.rms_norm_eps);
  t.attention_bias = f.bool_or("attention_bias", t.attention_bias);
  t.mlp_bias = f.bool_or("mlp_bias", t.mlp_bias);
  read_plain_rope(f, t);
  return t;
}

VisionConfig parse_vision(const json* vc, const std::string& origin) {
  VisionConfig v;  // LlavaConfig's default vision_config: CLIP ViT-L/14-336
  if (!vc) return v;
  io::JsonFields f(vc, nullptr, "vision_config.", origin);
  const std::string type = f.str_or("model_type", "clip_vision_model");
  if (type != "clip_vision_model")
    throw Unimplemented(origin + ": vision_config.model_type \"" + type +
                        "\" is not supported (clip_vision_model)");
  // A given object starts from CLIPVisionConfig's own defaults (ViT-B/32 at 224).
  v.hidden_size = f.int_or("hidden_size", 768);
  v.intermediate_size = f.int_or("intermediate_size", 3072);
  v.num_hidden_layers = f.int_or("num_hidden_layers", 12);
  v.num_attention_heads = f.int_or("num_attention_heads", 12);
  v.num_channels = f.int_or("num_channels", 3);
  v.image_size = f.int_or("image_size", 224);
  v.patch_size = f.int_or("patch_size", 32);
  v.layer_norm_eps = f.num_or("layer_norm_eps", 1e-5);
  v.hidden_act = f.str_or("hidden_act", "quick_gelu");
  return v;
}

std::vector<Resolution> parse_pinpoints(const json& v, const std::string& origin) {
  const std::string field = "image_grid_pinpoints";
  if (!v.is_array() || v.empty() || v.size() > 64)
    throw FormatError(origin + ": " + field + " must be a list of 1 to 64 [height, width] pairs, " +
                      "got " + io::json_excerpt(v));
  std::vector<Resolution> out;
  for (const json& p : v) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number_integer())
      throw FormatError(origin + ": " + field + " entry " + io::json_excerpt(p) +
                        " is not a [height, width] pair of integers");
    out.push_back({p[0].get<int64_t>(), p[1].get<int64_t>()});
  }
  return out;
}

std::vector<Resolution> default_pinpoints() {
  return {{336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}};
}

}  // namespace

int64_t Config::vision_layers_used() const {
  const int64_t L = vision.num_hidden_layers;
  return vision_feature_layer < 0 ? L + 1 + vision_feature_layer : vision_feature_layer;
}

Config parse_config(const std::string& json_text, const std::string& origin) {
  const json root = io::parse_json_object(json_text, origin);
  const io::ConfigIdentity id = io::config_identity(root, origin);
  Config c;
  if (id.architecture == kNextArch || (id.architecture.empty() && id.model_type == "llava_next"))
    c.next = true;
  else if (id.architecture == kArch || (id.architecture.empty() && id.model_type == "llava"))
    c.next = false;
  else
    throw FormatError(origin + ": architecture \"" + id.architecture + "\" / model_type \"" +
                      id.model_type + "\" is not LLaVA (" + kArch + " or " + kNextArch + ")");
  c.architecture = c.next ? kNextArch : kArch;
  c.model_type = c.next ? "llava_next" : "llava";
  io::JsonFields top(&root, nullptr, "", origin);
  c.torch_dtype = top.str_or("torch_dtype", top.str_or("dtype", "bfloat16"));
  c.image_token_index = top.token_or("image_token_index", top.token_or("image_token_id", 32000));
  if (const json* p = top.find("pad_token_id"); p && !p->is_null())
    c.pad_token_id = top.token_or("pad_token_id", -1);
  c.projector_hidden_act = top.str_or("projector_hidden_act", c.projector_hidden_act);
  c.multimodal_projector_bias = top.bool_or("multimodal_projector_bias", true);
  if (const json* fl = top.find("vision_feature_layer")) {
    if (!fl->is_number_integer())
      throw Unimplemented(origin + ": vision_feature_layer " + io::json_excerpt(*fl) +
                          " is not supported (one layer index)");
    c.vision_feature_layer = fl->get<int64_t>();
  }
  c.vision_feature_select_strategy =
      top.str_or("vision_feature_select_strategy", c.vision_feature_select_strategy);
  c.image_seq_length = top.int_or("image_seq_length", c.image_seq_length);
  c.tie_word_embeddings = top.bool_or("tie_word_embeddings", false);
  if (c.next) {
    const json* pp = top.find("image_grid_pinpoints");
    c.image_grid_pinpoints =
        pp && !pp->is_null() ? parse_pinpoints(*pp, origin) : default_pinpoints();
  }
  c.vision = parse_vision(sub_object(root, "vision_config", origin), origin);
  c.text = parse_text(sub_object(root, "text_config", origin), origin);
  return c;
}

Config load_config(const std::string& path) {
  return parse_config(io::read_text_file(path), path);
}

void Config::validate(const std::string& origin) const {
  auto fail = [&](const std::string& field, const std::string& what) {
    throw FormatError(origin + ": " + field + " " + what);
  };
  auto in_range = [&](const std::string& field, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
      fail(field, "is " + std::to_string(v) + ", outside [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
  };
  auto unsupported = [&](const std::string& field, const std::string& what) {
    throw Unimplemented(origin + ": " + field + " " + what);
  };
  const VisionConfig& v = vision;
  in_range("vision_config.hidden_size", v.hidden_size, 1, int64_t{1} << 16);
  in_range("vision_config.intermediate_size", v.intermediate_size, 1, int64_t{1} << 18);
  in_range("vision_config.num_hidden_layers", v.num_hidden_layers, 1, 1024);
  in_range("vision_config.num_attention_heads", v.num_attention_heads, 1, 1024);
  in_range("vision_config.image_size", v.image_size, 1, 4096);
  in_range("vision_config.patch_size", v.patch_size, 1, 1024);
  if (v.num_channels != 3) unsupported("vision_config.num_channels", "must be 3 (RGB)");
  if (v.image_size % v.patch_size != 0)
    fail("vision_config.image_size", std::to_string(v.image_size) +
                                         " is not a multiple of vision_config.patch_size " +
                                         std::to_string(v.patch_size));
  if (v.hidden_size % v.num_attention_heads != 0 || v.head_dim() % 16 != 0 || v.head_dim() > 512)
    fail("vision_config.hidden_size",
         std::to_string(v.hidden_size) + " over " + std::to_string(v.num_attention_heads) +
             " heads: the attention kernels need a head_dim that is a multiple of 16 up to 512");
  if (!(v.layer_norm_eps > 0 && v.layer_norm_eps < 1))
    fail("vision_config.layer_norm_eps", "must be in (0, 1)");
  if (v.hidden_act != "quick_gelu" && v.hidden_act != "gelu")
    unsupported("vision_config.hidden_act", "\"" + v.hidden_act + "\" (quick_gelu or gelu)");
  const int64_t used = vision_layers_used();
  if (used < 0 || used > v.num_hidden_layers)
    fail("vision_feature_layer", std::to_string(vision_feature_layer) +
                                     " selects no hidden state " + "of a tower with " +
                                     std::to_string(v.num_hidden_layers) + " layers");
  if (vision_feature_select_strategy != "default" && vision_feature_select_strategy != "full")
    fail("vision_feature_select_strategy",
         "is \"" + vision_feature_select_strategy + "\" (default or full)");
  if (next && vision_feature_select_strategy == "full")
    unsupported("vision_feature_select_strategy",
                "\"full\" with anyres: the crops' features would not form a patch grid");
  if (projector_hidden_act != "gelu")
    unsupported("projector_hidden_act", "\"" + projector_hidden_act + "\" (gelu)");
  for (const Resolution& p : image_grid_pinpoints)
    if (p.height < 1 || p.width < 1 || p.height % v.image_size || p.width % v.image_size ||
        (p.height / v.image_size) * (p.width / v.image_size) > 63)
      fail("image_grid_pinpoints", "entry [" + std::to_string(p.height) + ", " +
                                       std::to_string(p.width) + "] must be positive multiples " +
                                       "of the vision image_size " + std::to_string(v.image_size) +
                                       " of at most 63 crops");
  if (next && image_grid_pinpoints.empty()) fail("image_grid_pinpoints", "is empty");

  const TextConfig& t = text;
  validate_text_fields(t, origin, "text_config.", {.explicit_head_dim = t.head_dim > 0});
  in_range("text_config.head_dim", t.head_dim, 0, 512);
  in_range("text_config.sliding_window", t.sliding_window, 0, int64_t{1} << 24);
  if (t.heads_dim() % 16 != 0 || t.heads_dim() > 512)
    fail("text_config.head_dim", "is " + std::to_string(t.heads_dim()) +
                                     "; the decoder's attention needs a multiple of 16 up to 512");
  if (!(t.rms_norm_eps > 0 && t.rms_norm_eps < 1))
    fail("text_config.rms_norm_eps", "must be in (0, 1), got " + std::to_string(t.rms_norm_eps));
  if (t.attention_bias || t.mlp_bias)
    unsupported("text_config.attention_bias / mlp_bias", "true: biases are not supported");
  if (image_token_index < 0 || image_token_index >= t.vocab_size)
    fail("image_token_index", std::to_string(image_token_index) +
                                  " is outside the vocabulary [0, " + std::to_string(t.vocab_size) +
                                  ")");
}

std::string config_to_json(const Config& c) {
  using ordered = nlohmann::ordered_json;
  const VisionConfig& v = c.vision;
  const TextConfig& t = c.text;
  ordered vc;
  vc["hidden_act"] = v.hidden_act;
  vc["hidden_size"] = v.hidden_size;
  vc["image_size"] = v.image_size;
  vc["intermediate_size"] = v.intermediate_size;
  vc["layer_norm_eps"] = v.layer_norm_eps;
  vc["model_type"] = "clip_vision_model";
  vc["num_attention_heads"] = v.num_attention_heads;
  vc["num_channels"] = v.num_channels;
  vc["num_hidden_layers"] = v.num_hidden_layers;
  vc["patch_size"] = v.patch_size;
  vc["projection_dim"] = 768;
  vc["vocab_size"] = 32000;
  ordered tc;
  tc["architectures"] = {t.model_type == "mistral" ? "MistralForCausalLM" : "LlamaForCausalLM"};
  tc["bos_token_id"] = t.bos_token_id;
  tc["eos_token_id"] = t.eos_token_id;
  tc["hidden_act"] = t.hidden_act;
  tc["hidden_size"] = t.hidden_size;
  if (t.head_dim > 0) tc["head_dim"] = t.head_dim;
  tc["intermediate_size"] = t.intermediate_size;
  tc["max_position_embeddings"] = t.max_position_embeddings;
  tc["model_type"] = t.model_type;
  tc["num_attention_heads"] = t.num_attention_heads;
  tc["num_hidden_layers"] = t.num_hidden_layers;
  tc["num_key_value_heads"] = t.num_key_value_heads;
  tc["rms_norm_eps"] = t.rms_norm_eps;
  tc["rope_theta"] = t.rope_theta;
  if (t.model_type == "mistral")
    tc["sliding_window"] = t.sliding_window > 0 ? ordered(t.sliding_window) : ordered(nullptr);
  tc["tie_word_embeddings"] = t.tie_word_embeddings;
  tc["torch_dtype"] = c.torch_dtype;
  tc["vocab_size"] = t.vocab_size;
  ordered j;
  j["architectures"] = {c.architecture};
  j["ignore_index"] = -100;
  if (c.next) {
    ordered pins = ordered::array();
    for (const Resolution& p : c.image_grid_pinpoints) pins.push_back({p.height, p.width});
    j["image_grid_pinpoints"] = pins;
  }
  j["image_seq_length"] = c.image_seq_length;
  j["image_token_index"] = c.image_token_index;
  j["model_type"] = c.model_type;
  j["multimodal_projector_bias"] = c.multimodal_projector_bias;
  if (c.pad_token_id >= 0) j["pad_token_id"] = c.pad_token_id;
  j["projector_hidden_act"] = c.projector_hidden_act;
  j["text_config"] = tc;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = c.torch_dtype;
  j["transformers_version"] = "4.45.0";
  if (c.next) j["use_image_newline_parameter"] = true;
  j["vision_config"] = vc;
  j["vision_feature_layer"] = c.vision_feature_layer;
  j["vision_feature_select_strategy"] = c.vision_feature_select_strategy;
  return j.dump(2) + "\n";
}

std::string tensor_name(Naming naming, const std::string& canonical) {
  const bool decoder = canonical == "lm_head.weight" || canonical.rfind("model.", 0) == 0;
  if (naming == Naming::kOld) return decoder ? "language_model." + canonical : canonical;
  if (canonical == "lm_head.weight") return canonical;
  if (decoder) return "model.language_model." + canonical.substr(6);
  return "model." + canonical;
}

Naming detect_naming(const std::vector<std::string>& names, const std::string& origin) {
  bool old_style = false, new_style = false;
  for (const std::string& n : names) {
    if (n.rfind("language_model.model.", 0) == 0 || n.rfind("vision_tower.", 0) == 0)
      old_style = true;
    if (n.rfind("model.language_model.", 0) == 0 || n.rfind("model.vision_tower.", 0) == 0)
      new_style = true;
  }
  if (old_style == new_style)
    throw FormatError(origin + (old_style ? ": mixes" : ": has neither") +
                      " the old (language_model.model.*, vision_tower.*) and the new " +
                      "(model.language_model.*, model.vision_tower.*) LLaVA tensor names");
  return old_style ? Naming::kOld : Naming::kNew;
}

}  // namespace mmrt::models::llava
