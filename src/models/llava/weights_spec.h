// The one table of tensors a LLaVA / LLaVA-NeXT checkpoint holds (names and shapes from
// config.json), the decoder settings of its Llama / Mistral text model, and the checker every
// loader and `mmrt inspect` runs.
#pragma once

#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/checkpoint.h"
#include "models/decoder/decoder.h"
#include "models/llava/config.h"

namespace mmrt::models::llava {

// The text model as the shared decoder: Llama / Mistral (no biases, GQA, SwiGLU, RMSNorm, 1-D
// RoPE), names mapped to the checkpoint's convention.
DecoderConfig decoder_config(const Config& cfg, Naming naming);

// Every tensor with its canonical (old-style) name: the decoder's (lm_head omitted when `tied`),
// the CLIP tower's layers up to the selected hidden state (HF stores all of them: `all_layers`
// lists the unused ones too), the projector and image_newline (LLaVA-NeXT).
std::vector<ExpectedTensor> expected_tensors(const Config& cfg, bool tied, bool all_layers = true);

// True for LayerNorm / RMSNorm parameters (".weight" initialised to 1, ".bias" to 0).
bool is_norm_param(const std::string& canonical_name);

struct Layout {
  Naming naming = Naming::kOld;
  bool tied = false;
};
// Detects the layout and checks every tensor against cfg (check_checkpoint_tensors).
Layout check_checkpoint(const io::SafeTensors& st, const Config& cfg);

}  // namespace mmrt::models::llava
