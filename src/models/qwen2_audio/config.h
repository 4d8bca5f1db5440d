// Qwen2-Audio's config.json (Qwen2AudioConfig): the Whisper-style encoder's "audio_config"
// (Qwen2AudioEncoderConfig), the Qwen2 "text_config" (Qwen2Config, defaults for every field the
// published config omits), audio_token_index; validation and HF-style writing; and the
// checkpoint's tensor names (audio_tower.*, multi_modal_projector.*, language_model.model.*,
// language_model.lm_head.weight: the only layout HF has used for this model).
#pragma once

#include <cstdint>
#include <string>

#include "models/decoder/text_config.h"

namespace mmrt::models::qwen2_audio {

// Qwen2AudioEncoderConfig (defaults = the class defaults = Qwen2-Audio-7B's encoder).
struct AudioConfig {
  int64_t num_mel_bins = 128;
  int64_t encoder_layers = 32;
  int64_t encoder_attention_heads = 20;
  int64_t encoder_ffn_dim = 5120;
  int64_t d_model = 1280;
  int64_t max_source_positions = 1500;  // encoder rows after conv2 (stride 2)
  std::string activation_function = "gelu";
  bool scale_embedding = false;  // read for completeness: the HF forward never applies it
  int64_t head_dim() const { return d_model / encoder_attention_heads; }
  // Mel frames of one window: HF refuses any other input length.
  int64_t n_frames() const { return 2 * max_source_positions; }
};

// Qwen2Config (defaults = the class defaults: Qwen2-Audio-7B's published text_config is sparse).
struct TextConfig : TextFields {
  TextConfig()
      : TextFields{.vocab_size = 151936,
                   .hidden_size = 4096,
                   .intermediate_size = 22016,
                   .num_hidden_layers = 32,
                   .num_attention_heads = 32,
                   .num_key_value_heads = 32,
                   .max_position_embeddings = 32768,
                   .rope_theta = 10000.0,
                   .tie_word_embeddings = false,
                   .hidden_act = "silu",
                   .bos_token_id = 151643,
                   .eos_token_id = 151645} {}
  double rms_norm_eps = 1e-6;
  bool use_sliding_window = false;
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
};

struct Config {
  std::string architecture = "Qwen2AudioForConditionalGeneration";
  std::string model_type = "qwen2_audio";
  std::string torch_dtype = "bfloat16";
  AudioConfig audio;
  TextConfig text;
  int64_t audio_token_index = 151646;  // <|AUDIO|>

  // Range-checks every size before anything is allocated from it and checks the invariants the
  // runtime relies on (d_model % heads, hidden % heads, heads % kv_heads, head_dim a multiple of
  // 16 for the decoder's attention, token ids inside the vocabulary, gelu / silu, no sliding
  // window); FormatError naming the field.
  void validate(const std::string& origin) const;
};

// Parses config.json text (not validated); FormatError naming `origin` and the field for a
// wrong type, another architecture or model_type.
Config parse_config(const std::string& json_text, const std::string& origin);
Config load_config(const std::string& config_json_path);
// config.json as Hugging Face writes Qwen2AudioConfig (audio_config and text_config objects).
std::string config_to_json(const Config& cfg);

// Checkpoint name of a canonical name: decoder names ("model.*", "lm_head.weight") live under
// "language_model."; audio_tower.* and multi_modal_projector.* are stored as they are.
std::string tensor_name(const std::string& canonical);

}  // namespace mmrt::models::qwen2_audio
