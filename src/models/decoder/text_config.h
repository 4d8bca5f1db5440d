// The text model's config.json fields shared by the Llama-shaped families (LlamaConfig,
// MistralConfig, Qwen2Config, PersimmonConfig): one reader and one validator, so that every family
// reads them with the same types, limits and messages. A family's TextConfig derives from
// TextFields, sets its class defaults in its constructor and reads and checks its own extra fields
// (norm eps, head_dim rules, rotary layout) itself.
#pragma once

#include <cstdint>
#include <string>

#include "io/json_fields.h"

namespace mmrt::models {

struct TextFields {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;  // = num_attention_heads where the family has no GQA
  int64_t max_position_embeddings = 2048;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";
  int64_t bos_token_id = 1, eos_token_id = 2;
};

struct TextFieldRules {
  // The five shape fields (hidden, intermediate, layers, heads, vocab) must be present: the family
  // has no class defaults worth serving (Qwen2-VL). Otherwise an absent field keeps its default.
  bool shape_required = false;
  // num_key_value_heads is read; when absent it is num_attention_heads if kv_default_is_heads,
  // else it keeps its default. Without grouped_kv it is always num_attention_heads (Persimmon).
  bool grouped_kv = true;
  bool kv_default_is_heads = true;
};

// Reads the TextFields of `f` into `t` (fields a config omits keep t's values, except as `rules`
// say). FormatError naming the field for a wrong type or a missing required field.
void read_text_fields(const io::JsonFields& f, TextFields& t, const TextFieldRules& rules = {});

// "rope_scaling" / "rope_parameters" for a family with plain RoPE: null or absent is fine, an
// object may only say type / rope_type "default" and may carry rope_theta. Unimplemented naming
// the field for any other rotary (linear, dynamic, yarn, llama3 ...), FormatError for a bad shape.
void read_plain_rope(const io::JsonFields& f, TextFields& t);

// Every size is bounded (far above any released model) before it sizes an allocation; heads
// divide the width (unless the config gives head_dim) and key/value heads divide heads; rope_theta
// is in (0, 1e12); hidden_act is the family's (Unimplemented otherwise); bos and eos ids are in the
// vocabulary. Messages name `origin` and the field as `prefix` + name ("text_config.hidden_size").
struct TextChecks {
  std::string hidden_act = "silu";  // the one activation the family's decoder computes
  bool explicit_head_dim = false;   // the config gives head_dim; heads need not divide the width
  bool grouped_kv = true;           // false: num_key_value_heads is unused (every head has its own)
};
void validate_text_fields(const TextFields& t, const std::string& origin, const std::string& prefix,
                          const TextChecks& checks = {});

// The size check every config validator uses: FormatError "`origin`: `field` must be positive,
// got V" or "... V is larger than MAX, more than any model this runtime can serve".
void check_size(const std::string& origin, const std::string& field, int64_t v, int64_t max);

}  // namespace mmrt::models
