// The shared text-config reader and validator of the Llama-shaped families.
#include "models/decoder/text_config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace mmrt::models {

using nlohmann::json;

void read_text_fields(const io::JsonFields& f, TextFields& t, const TextFieldRules& rules) {
  auto shape = [&](const char* key, int64_t def) {
    return rules.shape_required ? f.req_int(key) : f.int_or(key, def);
  };
  t.hidden_size = shape("hidden_size", t.hidden_size);
  t.intermediate_size = shape("intermediate_size", t.intermediate_size);
  t.num_hidden_layers = shape("num_hidden_layers", t.num_hidden_layers);
  t.num_attention_heads = shape("num_attention_heads", t.num_attention_heads);
  t.vocab_size = shape("vocab_size", t.vocab_size);
  if (!rules.grouped_kv)
    t.num_key_value_heads = t.num_attention_heads;
  else
    t.num_key_value_heads =
        f.int_or("num_key_value_heads",
                 rules.kv_default_is_heads ? t.num_attention_heads : t.num_key_value_heads);
  t.max_position_embeddings = f.int_or("max_position_embeddings", t.max_position_embeddings);
  t.rope_theta = f.num_or("rope_theta", t.rope_theta);
  t.tie_word_embeddings = f.bool_or("tie_word_embeddings", t.tie_word_embeddings);
  t.hidden_act = f.str_or("hidden_act", t.hidden_act);
  t.bos_token_id = f.token_or("bos_token_id", t.bos_token_id);
  t.eos_token_id = f.token_or("eos_token_id", t.eos_token_id);
}

void read_plain_rope(const io::JsonFields& f, TextFields& t) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    std::string where;
    const json* rs = f.find(key, &where);
    if (!rs || rs->is_null()) continue;
    if (!rs->is_object())
      throw FormatError(f.origin() + ": field \"" + where + "\" must be an object, got " +
                        io::json_excerpt(*rs));
    for (const char* k : {"type", "rope_type"}) {
      if (!rs->contains(k)) continue;
      const json& v = (*rs)[k];
      if (!v.is_string() || v.get<std::string>() != "default")
        throw Unimplemented(f.origin() + ": field \"" + where + "." + k + "\" is " +
                            io::json_excerpt(v) + "; only plain RoPE (\"default\") is supported");
    }
    if (rs->contains("rope_theta")) {
      if (!(*rs)["rope_theta"].is_number())
        throw FormatError(f.origin() + ": field \"" + where + ".rope_theta\" must be a number");
      t.rope_theta = (*rs)["rope_theta"].get<double>();
    }
  }
}

void check_size(const std::string& origin, const std::string& field, int64_t v, int64_t max) {
  if (v <= 0)
    throw FormatError(origin + ": " + field + " must be positive, got " + std::to_string(v));
  if (v > max)
    throw FormatError(origin + ": " + field + " " + std::to_string(v) + " is larger than " +
                      std::to_string(max) + ", more than any model this runtime can serve");
}

void validate_text_fields(const TextFields& t, const std::string& origin, const std::string& prefix,
                          const TextChecks& checks) {
  auto fail = [&](const std::string& field, const std::string& what) {
    throw FormatError(origin + ": " + prefix + field + " " + what);
  };
  auto size = [&](const char* field, int64_t v, int64_t max) {
    check_size(origin, prefix + field, v, max);
  };
  size("hidden_size", t.hidden_size, int64_t{1} << 17);
  size("intermediate_size", t.intermediate_size, int64_t{1} << 20);
  size("num_hidden_layers", t.num_hidden_layers, 4096);
  size("num_attention_heads", t.num_attention_heads, 4096);
  if (checks.grouped_kv) size("num_key_value_heads", t.num_key_value_heads, 4096);
  size("vocab_size", t.vocab_size, int64_t{1} << 22);
  size("max_position_embeddings", t.max_position_embeddings, int64_t{1} << 24);
  if (!checks.explicit_head_dim && t.hidden_size % t.num_attention_heads != 0)
    fail("hidden_size", std::to_string(t.hidden_size) + " is not divisible by " + prefix +
                            "num_attention_heads " + std::to_string(t.num_attention_heads));
  if (checks.grouped_kv && t.num_attention_heads % t.num_key_value_heads != 0)
    fail("num_attention_heads", std::to_string(t.num_attention_heads) + " is not a multiple of " +
                                    prefix + "num_key_value_heads " +
                                    std::to_string(t.num_key_value_heads));
  if (!(t.rope_theta > 0 && t.rope_theta < 1e12))
    fail("rope_theta", "must be in (0, 1e12), got " + std::to_string(t.rope_theta));
  if (t.hidden_act != checks.hidden_act)
    throw Unimplemented(origin + ": " + prefix + "hidden_act is \"" + t.hidden_act + "\"; only \"" +
                        checks.hidden_act + "\" is supported");
  const std::pair<const char*, int64_t> ids[] = {{"bos_token_id", t.bos_token_id},
                                                 {"eos_token_id", t.eos_token_id}};
  for (const auto& [field, id] : ids)
    if (id < 0 || id >= t.vocab_size)
      fail(field, std::to_string(id) + " is outside the vocabulary [0, " +
                      std::to_string(t.vocab_size) + ")");
}

}  // namespace mmrt::models
