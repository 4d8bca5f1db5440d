// Qwen2.5-VL's config.json: the text model and token ids exactly as Qwen2-VL's (parsed and checked
// by the same code), and the vision tower's own fields (RMSNorm blocks, a gated SiLU MLP, window
// attention with full attention in a few blocks, an output width of its own).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/qwen2_vl/config.h"

namespace mmrt::models::qwen2_5_vl {

// vision_config (defaults: Qwen2.5-VL-3B's).
struct VisionConfig {
  int64_t depth = 32;
  int64_t hidden_size = 1280;  // the tower's width (Qwen2-VL's embed_dim)
  int64_t intermediate_size = 3420;
  int64_t num_heads = 16;
  int64_t in_chans = 3;
  int64_t out_hidden_size = 2048;  // merger output = the language model's hidden size
  int64_t patch_size = 14;
  int64_t spatial_merge_size = 2;
  int64_t temporal_patch_size = 2;
  int64_t window_size = 112;      // pixels per side of an attention window
  int64_t tokens_per_second = 2;  // M-RoPE's time scale for video
  std::vector<int64_t> fullatt_block_indexes{7, 15, 23, 31};
  std::string hidden_act = "silu";
  int64_t head_dim() const { return hidden_size / num_heads; }
  // Merged tokens per side of a window (112 / 2 / 14 = 4: windows of 4 x 4 tokens, 64 patches).
  int64_t window_tokens() const { return window_size / spatial_merge_size / patch_size; }
  bool full_attention(int64_t block) const;
};

struct Config {
  // Text model, token ids, dtype; its `vision` holds the patch geometry the shared processor
  // reads (patch, merge and temporal sizes; embed_dim = hidden_size, hidden_size =
  // out_hidden_size).
  qwen2_vl::Config qwen2;
  VisionConfig vision;
  // The checks of Qwen2-VL's text model and tokens, then the tower's: sizes bounded, heads
  // dividing the width, an even rotary half, windows a whole number of merged tokens, full
  // attention indexes inside the depth, the output width equal to the text hidden size.
  void validate(const std::string& origin) const;
};

inline constexpr const char* kArchitecture = "Qwen2_5_VLForConditionalGeneration";
inline constexpr const char* kModelType = "qwen2_5_vl";

Config parse_config(const std::string& json_text, const std::string& origin);
Config load_config(const std::string& config_json_path);
// config.json as Hugging Face writes it for Qwen2.5-VL (top-level text fields, vision_config).
std::string config_to_json(const Config& cfg);

}  // namespace mmrt::models::qwen2_5_vl
