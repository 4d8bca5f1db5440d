// Qwen2-VL's config.json: text fields (top level or text_config), vision_config, special token
// ids; and the checkpoint's tensor-name convention.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "models/decoder/text_config.h"

namespace mmrt::models::qwen2_vl {

using GridThw = std::array<int64_t, 3>;  // (t, h, w) in patches, as image_grid_thw

// The text model: the shared Llama-shaped fields (defaults: Qwen2-VL-2B's) and Qwen2's extras.
struct TextConfig : TextFields {
  TextConfig()
      : TextFields{.vocab_size = 151936,
                   .hidden_size = 1536,
                   .intermediate_size = 8960,
                   .num_hidden_layers = 28,
                   .num_attention_heads = 12,
                   .num_key_value_heads = 2,
                   .max_position_embeddings = 32768,
                   .rope_theta = 1e6,
                   .tie_word_embeddings = true,
                   .hidden_act = "silu",
                   .bos_token_id = 151643,
                   .eos_token_id = 151645} {}
  double rms_norm_eps = 1e-6;
  std::vector<int64_t> mrope_section{16, 24, 24};  // empty: plain RoPE
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
};

struct VisionConfig {
  int64_t depth = 32;
  int64_t embed_dim = 1280;
  int64_t mlp_ratio = 4;
  int64_t num_heads = 16;
  int64_t in_chans = 3;
  int64_t hidden_size = 1536;  // merger output = LLM hidden
  int64_t patch_size = 14;
  int64_t spatial_merge_size = 2;
  int64_t temporal_patch_size = 2;
  std::string hidden_act = "quick_gelu";
  int64_t head_dim() const { return embed_dim / num_heads; }
  int64_t mlp_hidden() const { return embed_dim * mlp_ratio; }
};

struct Config {
  std::string architecture = "Qwen2VLForConditionalGeneration";
  std::string model_type = "qwen2_vl";
  std::string torch_dtype = "bfloat16";
  TextConfig text;
  VisionConfig vision;
  int64_t vision_start_token_id = 151652;
  int64_t vision_end_token_id = 151653;
  int64_t vision_token_id = 151654;
  int64_t image_token_id = 151655;
  int64_t video_token_id = 151656;

  // Validates the invariants the runtime relies on (hidden % heads == 0, heads % kv_heads == 0,
  // sum(mrope_section) == head_dim/2, vision head_dim/2 even, merger out == text hidden, ...);
  // throws FormatError naming the field.
  void validate(const std::string& origin) const;
};

// Parses config.json text; unknown architectures and missing required fields are FormatErrors
// naming `origin` and the field.
Config parse_config(const std::string& json_text, const std::string& origin);
Config load_config(const std::string& config_json_path);
// What Qwen2.5-VL shares (models/qwen2_5_vl): the identity, checked against `architecture` and
// `model_type`, the text model and the token ids; vision_config must be an object but is not
// read. And their checks (Config::validate runs them, then the vision tower's).
Config parse_text_and_tokens(const std::string& json_text, const std::string& origin,
                             const std::string& architecture, const std::string& model_type);
void validate_text_and_tokens(const Config& cfg, const std::string& origin);
// config.json exactly as Hugging Face writes it for Qwen2-VL (top-level text fields).
std::string config_to_json(const Config& cfg);

// Tensor-name convention of a Qwen2-VL checkpoint: old (`model.*`, `visual.*`) or new
// (`model.language_model.*`, `model.visual.*`). Names passed in are canonical old-style
// ("model.layers.0.self_attn.q_proj.weight", "visual.blocks.0.attn.qkv.weight", "lm_head.weight").
enum class Naming { kOld, kNew };
std::string tensor_name(Naming naming, const std::string& canonical);
// Detects the convention from the tensor names present; FormatError when neither matches.
Naming detect_naming(const std::vector<std::string>& names, const std::string& origin);

}  // namespace mmrt::models::qwen2_vl
