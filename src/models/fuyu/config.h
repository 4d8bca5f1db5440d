// Fuyu-8B's config.json (FuyuConfig): the Persimmon decoder (its "text_config", PersimmonConfig,
// or the flat top-level fields it is built from when absent), the patch embedding's size and the
// image token; validation and HF-style writing. The tensor table is weights_spec.h's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/decoder/text_config.h"

namespace mmrt::models::fuyu {

// PersimmonConfig (defaults = the class defaults = Fuyu-8B's).
struct TextConfig : TextFields {
  TextConfig()
      : TextFields{.vocab_size = 262144,
                   .hidden_size = 4096,
                   .intermediate_size = 16384,
                   .num_hidden_layers = 36,
                   .num_attention_heads = 64,
                   .num_key_value_heads = 64,  // no grouped key/values
                   .max_position_embeddings = 16384,
                   .rope_theta = 25000.0,
                   .tie_word_embeddings = false,
                   .hidden_act = "relu2",
                   .bos_token_id = 1,
                   .eos_token_id = 2} {}
  double layer_norm_eps = 1e-5;
  double partial_rotary_factor = 0.5;
  bool qk_layernorm = true;
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t rotary_dim() const {
    return static_cast<int64_t>(static_cast<double>(head_dim()) * partial_rotary_factor);
  }
};

struct Config {
  std::string architecture = "FuyuForCausalLM";
  std::string model_type = "fuyu";
  std::string torch_dtype = "bfloat16";
  TextConfig text;
  int64_t hidden_size = 4096;  // the patch embedding's output (the decoder's width)
  int64_t patch_size = 30;
  int64_t num_channels = 3;
  int64_t image_token_id = 71011;  // |SPEAKER|
  int64_t patch_dim() const { return patch_size * patch_size * num_channels; }

  // Range-checks every size before it sizes anything; FormatError naming the field,
  // Unimplemented for settings it does not run.
  void validate(const std::string& origin) const;
};

Config parse_config(const std::string& json_text, const std::string& origin);
Config load_config(const std::string& config_json_path);
std::string config_to_json(const Config& cfg);

}  // namespace mmrt::models::fuyu
