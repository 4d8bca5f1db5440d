// Fuyu config.json: parsing with the transformers class defaults, validation, writing, names.
#include "models/fuyu/config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_fields.h"

namespace mmrt::models::fuyu {

using nlohmann::json;

namespace {

constexpr const char* kArch = "FuyuForCausalLM";

// The decoder's fields from `f` (text_config, or the top level FuyuConfig builds it from).
void parse_text(const io::JsonFields& f, TextConfig& t) {
  read_text_fields(f, t, {.grouped_kv = false});
  t.layer_norm_eps = f.num_or("layer_norm_eps", t.layer_norm_eps);
  t.partial_rotary_factor = f.num_or("partial_rotary_factor", t.partial_rotary_factor);
  t.qk_layernorm = f.bool_or("qk_layernorm", t.qk_layernorm);
  read_plain_rope(f, t);
}

}  // namespace

Config parse_config(const std::string& json_text, const std::string& origin) {
  const json root = io::parse_json_object(json_text, origin);
  const io::ConfigIdentity id = io::config_identity(root, origin);
  if (!(id.architecture == kArch || (id.architecture.empty() && id.model_type == "fuyu")))
    throw FormatError(origin + ": architecture \"" + id.architecture + "\" / model_type \"" +
                      id.model_type + "\" is not " + kArch);
  Config c;
  io::JsonFields top(&root, nullptr, "", origin);
  c.torch_dtype = top.str_or("torch_dtype", top.str_or("dtype", "bfloat16"));
  c.hidden_size = top.int_or("hidden_size", c.hidden_size);
  c.patch_size = top.int_or("patch_size", c.patch_size);
  c.num_channels = top.int_or("num_channels", c.num_channels);
  c.image_token_id = top.token_or("image_token_id", c.image_token_id);
  // FuyuConfig builds text_config from its own flat fields when none is given; a given one is
  // what the language model is made from.
  parse_text(top, c.text);
  if (root.contains("text_config") && !root["text_config"].is_null()) {
    if (!root["text_config"].is_object())
      throw FormatError(origin + ": field \"text_config\" must be an object");
    TextConfig t;
    parse_text(io::JsonFields(&root["text_config"], nullptr, "text_config.", origin), t);
    c.text = t;
  }
  return c;
}

Config load_config(const std::string& path) {
  return parse_config(io::read_text_file(path), path);
}

void Config::validate(const std::string& origin) const {
  auto fail = [&](const std::string& field, const std::string& what) {
    throw FormatError(origin + ": " + field + " " + what);
  };
  auto in_range = [&](const std::string& field, int64_t v, int64_t hi) {
    if (v < 1 || v > hi)
      fail(field, "is " + std::to_string(v) + ", outside [1, " + std::to_string(hi) + "]");
  };
  const TextConfig& t = text;
  validate_text_fields(t, origin, "", {.hidden_act = "relu2", .grouped_kv = false});
  in_range("patch_size", patch_size, 1024);
  if (num_channels != 3) throw Unimplemented(origin + ": num_channels must be 3 (RGB)");
  if (hidden_size != t.hidden_size)
    fail("hidden_size", std::to_string(hidden_size) + " (the patch embedding's) disagrees with " +
                            "text_config.hidden_size " + std::to_string(t.hidden_size));
  if (t.head_dim() % 16 != 0 || t.head_dim() > 512)
    fail("hidden_size", std::to_string(t.hidden_size) + " over " +
                            std::to_string(t.num_attention_heads) +
                            " heads: the attention needs a head_dim that is a multiple of 16 "
                            "up to 512");
  if (!(t.partial_rotary_factor > 0 && t.partial_rotary_factor <= 1) || t.rotary_dim() < 2 ||
      t.rotary_dim() % 2 != 0)
    fail("partial_rotary_factor", "gives " + std::to_string(t.rotary_dim()) + " rotated dims of " +
                                      std::to_string(t.head_dim()) +
                                      "; they must be even and at least 2");
  if (!(t.layer_norm_eps > 0 && t.layer_norm_eps < 1)) fail("layer_norm_eps", "must be in (0, 1)");
  if (image_token_id < 0 || image_token_id >= t.vocab_size)
    fail("image_token_id", std::to_string(image_token_id) + " is outside the vocabulary [0, " +
                               std::to_string(t.vocab_size) + ")");
}

std::string config_to_json(const Config& c) {
  using ordered = nlohmann::ordered_json;
  const TextConfig& t = c.text;
  auto text_fields = [&](ordered& j) {
    j["bos_token_id"] = t.bos_token_id;
    j["eos_token_id"] = t.eos_token_id;
    j["hidden_act"] = t.hidden_act;
    j["hidden_size"] = t.hidden_size;
    j["intermediate_size"] = t.intermediate_size;
    j["layer_norm_eps"] = t.layer_norm_eps;
    j["max_position_embeddings"] = t.max_position_embeddings;
    j["num_attention_heads"] = t.num_attention_heads;
    j["num_hidden_layers"] = t.num_hidden_layers;
    j["partial_rotary_factor"] = t.partial_rotary_factor;
    j["qk_layernorm"] = t.qk_layernorm;
    j["rope_theta"] = t.rope_theta;
    j["tie_word_embeddings"] = t.tie_word_embeddings;
    j["vocab_size"] = t.vocab_size;
  };
  ordered j;
  j["architectures"] = {c.architecture};
  text_fields(j);
  j["image_size"] = 300;
  j["image_token_id"] = c.image_token_id;
  j["model_type"] = c.model_type;
  j["num_channels"] = c.num_channels;
  j["patch_size"] = c.patch_size;
  ordered tc;
  text_fields(tc);
  tc["model_type"] = "persimmon";
  j["text_config"] = tc;
  j["torch_dtype"] = c.torch_dtype;
  j["transformers_version"] = "4.45.0";
  return j.dump(2) + "\n";
}

}  // namespace mmrt::models::fuyu
