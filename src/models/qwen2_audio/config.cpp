// Qwen2-Audio config.json: parsing with the transformers class defaults, validation, writing.
#include "models/qwen2_audio/config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_fields.h"

namespace mmrt::models::qwen2_audio {

using nlohmann::json;

namespace {

constexpr const char* kArch = "Qwen2AudioForConditionalGeneration";

// The sub-object `key` of the root, or null when absent / null (the class defaults apply).
const json* sub_object(const json& root, const char* key, const std::string& origin) {
  if (!root.contains(key) || root[key].is_null()) return nullptr;
  if (!root[key].is_object())
    throw FormatError(origin + ": field \"" + key + "\" must be an object, got " +
                      io::json_excerpt(root[key]));
  return &root[key];
}

}  // namespace

Config parse_config(const std::string& json_text, const std::string& origin) {
  const json root = io::parse_json_object(json_text, origin);
  const io::ConfigIdentity id = io::config_identity(root, origin);
  Config c;
  if (!id.model_type.empty() && id.model_type != "qwen2_audio")
    throw FormatError(origin + ": field \"model_type\" is \"" + id.model_type +
                      "\", expected \"qwen2_audio\"");
  if (id.architecture.empty() && id.model_type.empty())
    throw FormatError(origin + ": neither \"architectures\" nor \"model_type\" names Qwen2-Audio");
  if (!id.architecture.empty() && id.architecture != kArch)
    throw FormatError(origin + ": unsupported architecture \"" + id.architecture + "\" (expected " +
                      kArch + ")");
  io::JsonFields top(&root, nullptr, "", origin);
  c.torch_dtype = top.str_or("torch_dtype", top.str_or("dtype", "bfloat16"));
  // Newer configs may spell it audio_token_id (an attribute alias of audio_token_index).
  c.audio_token_index = top.token_or("audio_token_index", top.token_or("audio_token_id", 151646));

  const json* ac = sub_object(root, "audio_config", origin);
  if (ac) {
    io::JsonFields a(ac, nullptr, "audio_config.", origin);
    AudioConfig& x = c.audio;
    x.num_mel_bins = a.int_or("num_mel_bins", x.num_mel_bins);
    x.encoder_layers = a.int_or("encoder_layers", a.int_or("num_hidden_layers", x.encoder_layers));
    x.encoder_attention_heads = a.int_or("encoder_attention_heads", x.encoder_attention_heads);
    x.encoder_ffn_dim = a.int_or("encoder_ffn_dim", x.encoder_ffn_dim);
    x.d_model = a.int_or("d_model", x.d_model);
    x.max_source_positions = a.int_or("max_source_positions", x.max_source_positions);
    x.activation_function = a.str_or("activation_function", x.activation_function);
    x.scale_embedding = a.bool_or("scale_embedding", x.scale_embedding);
  }
  const json* tc = sub_object(root, "text_config", origin);
  if (tc) {
    io::JsonFields f(tc, nullptr, "text_config.", origin);
    TextConfig& t = c.text;
    // Qwen2Config's default is 32 key/value heads, not num_attention_heads.
    read_text_fields(f, t, {.kv_default_is_heads = false});
    t.rms_norm_eps = f.num_or("rms_norm_eps", t.rms_norm_eps);
    t.use_sliding_window = f.bool_or("use_sliding_window", t.use_sliding_window);
    read_plain_rope(f, t);
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
  // Every size is bounded (far above any released model) before it sizes an allocation.
  auto in_range = [&](const std::string& field, int64_t v, int64_t hi) {
    if (v < 1 || v > hi)
      fail(field, "is " + std::to_string(v) + ", outside [1, " + std::to_string(hi) + "]");
  };
  const AudioConfig& a = audio;
  in_range("audio_config.num_mel_bins", a.num_mel_bins, 512);
  in_range("audio_config.encoder_layers", a.encoder_layers, 1024);
  in_range("audio_config.encoder_attention_heads", a.encoder_attention_heads, 1024);
  in_range("audio_config.d_model", a.d_model, int64_t{1} << 16);
  in_range("audio_config.encoder_ffn_dim", a.encoder_ffn_dim, int64_t{1} << 18);
  in_range("audio_config.max_source_positions", a.max_source_positions, int64_t{1} << 15);
  if (a.d_model % a.encoder_attention_heads != 0)
    fail("audio_config.d_model", std::to_string(a.d_model) +
                                     " is not divisible by audio_config.encoder_attention_heads " +
                                     std::to_string(a.encoder_attention_heads));
  if (a.head_dim() > 512)
    fail("audio_config.d_model", "gives an encoder head_dim of " + std::to_string(a.head_dim()) +
                                     ", over the attention kernels' 512");
  if (a.max_source_positions % 2 != 0)
    fail("audio_config.max_source_positions",
         "is " + std::to_string(a.max_source_positions) +
             "; it must be even (the encoder pools pairs of rows)");
  if (a.activation_function != "gelu")
    fail("audio_config.activation_function",
         "is \"" + a.activation_function + "\"; only \"gelu\" is supported");

  const TextConfig& t = text;
  validate_text_fields(t, origin, "text_config.");
  if (t.head_dim() % 16 != 0 || t.head_dim() > 512)
    fail("text_config.hidden_size", "gives head_dim " + std::to_string(t.head_dim()) +
                                        "; the decoder's attention needs a multiple of 16 "
                                        "up to 512");
  if (!(t.rms_norm_eps > 0 && t.rms_norm_eps < 1))
    fail("text_config.rms_norm_eps", "must be in (0, 1), got " + std::to_string(t.rms_norm_eps));
  if (t.use_sliding_window)
    fail("text_config.use_sliding_window", "is true; sliding-window attention is not supported");
  if (audio_token_index < 0 || audio_token_index >= t.vocab_size)
    fail("audio_token_index", std::to_string(audio_token_index) +
                                  " is outside the vocabulary [0, " + std::to_string(t.vocab_size) +
                                  ")");
}

std::string config_to_json(const Config& c) {
  using ordered = nlohmann::ordered_json;
  const AudioConfig& a = c.audio;
  const TextConfig& t = c.text;
  ordered ac;
  ac["activation_dropout"] = 0.0;
  ac["activation_function"] = a.activation_function;
  ac["attention_dropout"] = 0.0;
  ac["d_model"] = a.d_model;
  ac["dropout"] = 0.0;
  ac["encoder_attention_heads"] = a.encoder_attention_heads;
  ac["encoder_ffn_dim"] = a.encoder_ffn_dim;
  ac["encoder_layerdrop"] = 0.0;
  ac["encoder_layers"] = a.encoder_layers;
  ac["init_std"] = 0.02;
  ac["max_source_positions"] = a.max_source_positions;
  ac["model_type"] = "qwen2_audio_encoder";
  ac["num_mel_bins"] = a.num_mel_bins;
  ac["scale_embedding"] = a.scale_embedding;
  ordered tc;
  tc["bos_token_id"] = t.bos_token_id;
  tc["eos_token_id"] = t.eos_token_id;
  tc["hidden_act"] = t.hidden_act;
  tc["hidden_size"] = t.hidden_size;
  tc["intermediate_size"] = t.intermediate_size;
  tc["max_position_embeddings"] = t.max_position_embeddings;
  tc["model_type"] = "qwen2";
  tc["num_attention_heads"] = t.num_attention_heads;
  tc["num_hidden_layers"] = t.num_hidden_layers;
  tc["num_key_value_heads"] = t.num_key_value_heads;
  tc["rms_norm_eps"] = t.rms_norm_eps;
  tc["rope_theta"] = t.rope_theta;
  tc["sliding_window"] = t.max_position_embeddings;
  tc["tie_word_embeddings"] = t.tie_word_embeddings;
  tc["torch_dtype"] = c.torch_dtype;
  tc["use_mrope"] = false;
  tc["use_sliding_window"] = t.use_sliding_window;
  tc["vocab_size"] = t.vocab_size;
  ordered j;
  j["architectures"] = {c.architecture};
  j["audio_config"] = ac;
  j["audio_token_index"] = c.audio_token_index;
  j["ignore_index"] = -100;
  j["model_type"] = c.model_type;
  j["text_config"] = tc;
  j["torch_dtype"] = c.torch_dtype;
  j["transformers_version"] = "4.45.0.dev0";
  j["vocab_size"] = t.vocab_size;
  return j.dump(2) + "\n";
}

std::string tensor_name(const std::string& canonical) {
  if (canonical == "lm_head.weight" || canonical.rfind("model.", 0) == 0)
    return "language_model." + canonical;
  return canonical;
}

}  // namespace mmrt::models::qwen2_audio
