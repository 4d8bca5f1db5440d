// The one table of tensors a Fuyu checkpoint holds (names and shapes from config.json) in both
// namings, the decoder settings of its Persimmon text model (LayerNorm, fused per-head q/k/v,
// q/k LayerNorm, partial rotary, relu²), and the checker every loader and `mmrt inspect` runs.
#pragma once

#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/checkpoint.h"
#include "models/decoder/decoder.h"
#include "models/fuyu/config.h"

namespace mmrt::models::fuyu {

// kOld: language_model.model.*, language_model.lm_head.weight, vision_embed_tokens.*;
// kNew: model.language_model.*, lm_head.weight, model.vision_embed_tokens.*.
enum class Naming { kOld, kNew };
// Checkpoint name of a canonical name (the decoder's Llama-style canonical names mapped to
// Persimmon's: query_key_value, dense, q/k_layernorm, dense_h_to_4h, dense_4h_to_h,
// final_layernorm; "vision_embed_tokens.*" as it is).
std::string tensor_name(Naming naming, const std::string& canonical);

DecoderConfig decoder_config(const Config& cfg, Naming naming);
// Every tensor with its canonical name (lm_head omitted when `tied`).
std::vector<ExpectedTensor> expected_tensors(const Config& cfg, bool tied);
bool is_norm_param(const std::string& canonical_name);

struct Layout {
  Naming naming = Naming::kOld;
  bool tied = false;
};
// Detects the naming and checks every tensor against cfg.
Layout check_checkpoint(const io::SafeTensors& st, const Config& cfg);

}  // namespace mmrt::models::fuyu
