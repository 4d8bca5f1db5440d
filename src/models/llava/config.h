// LLaVA-1.5 (LlavaConfig) and LLaVA-NeXT / 1.6 (LlavaNextConfig) config.json: the CLIP
// "vision_config" (CLIPVisionConfig), the Llama or Mistral "text_config" (LlamaConfig /
// MistralConfig defaults for every field a published config omits), the projector and the
// image settings; validation and HF-style writing; both checkpoint naming conventions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/llava/anyres.h"

#include "models/decoder/text_config.h"

namespace mmrt::models::llava {

// CLIPVisionConfig. The defaults here are LlavaConfig's vision_config when none is given
// (CLIP ViT-L/14-336); a given vision_config object starts from CLIPVisionConfig's own defaults.
struct VisionConfig {
  int64_t hidden_size = 1024;
  int64_t intermediate_size = 4096;
  int64_t num_hidden_layers = 24;
  int64_t num_attention_heads = 16;
  int64_t num_channels = 3;
  int64_t image_size = 336;
  int64_t patch_size = 14;
  double layer_norm_eps = 1e-5;
  std::string hidden_act = "quick_gelu";
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t side() const { return image_size / patch_size; }  // patches per image side
  int64_t n_positions() const { return side() * side() + 1; }
};

// LlamaConfig / MistralConfig (model_type "llama" / "mistral"; their defaults differ).
struct TextConfig : TextFields {  // the shared fields' defaults are LlamaConfig's
  std::string model_type = "llama";
  int64_t head_dim = 0;        // 0: hidden_size / num_attention_heads
  int64_t sliding_window = 0;  // Mistral; 0: none
  double rms_norm_eps = 1e-6;
  bool attention_bias = false, mlp_bias = false;
  int64_t heads_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
};

struct Config {
  bool next = true;  // LlavaNextForConditionalGeneration (anyres); false: LLaVA-1.5
  std::string architecture = "LlavaNextForConditionalGeneration";
  std::string model_type = "llava_next";
  std::string torch_dtype = "bfloat16";
  VisionConfig vision;
  TextConfig text;
  int64_t image_token_index = 32000;
  int64_t pad_token_id = -1;  // -1: absent
  std::string projector_hidden_act = "gelu";
  bool multimodal_projector_bias = true;
  int64_t vision_feature_layer = -2;  // index into the tower's hidden states (-1: last layer)
  std::string vision_feature_select_strategy = "default";  // "default" drops the class token
  std::vector<Resolution> image_grid_pinpoints;            // (height, width), LLaVA-NeXT
  int64_t image_seq_length = 576;
  bool tie_word_embeddings = false;

  // Encoder layers that run: those up to the selected hidden state.
  int64_t vision_layers_used() const;
  // Range-checks every size before it sizes anything and the invariants the runtime relies on;
  // FormatError naming the field, Unimplemented for settings it does not run.
  void validate(const std::string& origin) const;
};

// Parses config.json text (not validated). FormatError naming `origin` and the field.
Config parse_config(const std::string& json_text, const std::string& origin);
Config load_config(const std::string& config_json_path);
// config.json as Hugging Face writes LlavaConfig / LlavaNextConfig.
std::string config_to_json(const Config& cfg);

// Tensor naming: kOld (llava-hf's original saves: language_model.model.*,
// language_model.lm_head.weight, vision_tower.*, multi_modal_projector.*, image_newline) or
// kNew (transformers >= 4.52: model.language_model.*, lm_head.weight, model.vision_tower.*,
// model.multi_modal_projector.*, model.image_newline).
enum class Naming { kOld, kNew };
// Checkpoint name of a canonical name: the decoder's ("model.*", "lm_head.weight") or the
// rest's as the old layout stores them without "language_model." ("vision_tower.*", ...).
std::string tensor_name(Naming naming, const std::string& canonical);
// FormatError naming `origin` when the names fit neither convention.
Naming detect_naming(const std::vector<std::string>& names, const std::string& origin);

}  // namespace mmrt::models::llava
