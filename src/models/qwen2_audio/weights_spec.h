// The one table of tensors a Qwen2-Audio checkpoint holds (names and shapes from config.json),
// the decoder settings of its Qwen2 text model, and the checker every loader and `mmrt inspect`
// runs before any compute.
#pragma once

#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/checkpoint.h"
#include "models/decoder/decoder.h"
#include "models/qwen2_audio/config.h"

namespace mmrt::models::qwen2_audio {

// Qwen2 as the shared decoder: q/k/v bias, SwiGLU, RMSNorm, 1-D RoPE with the config's theta,
// names under language_model.
DecoderConfig decoder_config(const Config& cfg);

// Every tensor of Qwen2AudioForConditionalGeneration, canonical names (decoder names as the
// decoder spells them, lm_head omitted when `tied`; then audio_tower.* and
// multi_modal_projector.*, stored as they are).
std::vector<ExpectedTensor> expected_tensors(const Config& cfg, bool tied);

// True for LayerNorm / RMSNorm parameters (".weight" initialised to 1, ".bias" to 0).
bool is_norm_param(const std::string& canonical_name);

struct Layout {
  bool tied = false;  // no language_model.lm_head.weight: the head is embed_tokens
};
// Checks every tensor against cfg (check_checkpoint_tensors): FormatError listing the missing,
// unexpected, wrong-shape and wrong-dtype ones.
Layout check_checkpoint(const io::SafeTensors& st, const Config& cfg);

}  // namespace mmrt::models::qwen2_audio
