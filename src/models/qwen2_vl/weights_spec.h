// The one table of tensors a Qwen2-VL checkpoint holds (names and shapes from config.json), the
// decoder settings of its text model, and the checker every loader and `mmrt inspect` runs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/checkpoint.h"
#include "models/decoder/decoder.h"
#include "models/qwen2_vl/config.h"

namespace mmrt::models::qwen2_vl {

// The text model as the shared decoder: Qwen2 (q/k/v bias, SwiGLU, RMSNorm) with M-RoPE (or
// plain RoPE when mrope_section is empty), names mapped to the checkpoint's convention.
DecoderConfig decoder_config(const Config& cfg, Naming naming);

// The text model's tensors with their canonical names (lm_head omitted when `tied`): the first
// part of expected_tensors, and of Qwen2.5-VL's.
std::vector<ExpectedTensor> text_tensors(const Config& cfg, bool tied);

// Every text and vision tensor of Qwen2VLForConditionalGeneration with its canonical (old-style)
// name: the decoder's tensors (lm_head omitted when `tied`), then the vision tower.
std::vector<ExpectedTensor> expected_tensors(const Config& cfg, bool tied);

// True for LayerNorm / RMSNorm parameters (".weight" initialised to 1, ".bias" to 0).
bool is_norm_param(const std::string& canonical_name);

// What an opened Qwen2-VL checkpoint is: its naming and whether lm_head is tied.
struct Layout {
  Naming naming = Naming::kOld;
  bool tied = false;
};
// Detects the layout and checks every tensor against cfg (check_checkpoint_tensors).
Layout check_checkpoint(const io::SafeTensors& st, const Config& cfg);
// The same for a family on this naming (Qwen2.5-VL): `expected(tied)` lists its tensors with
// canonical names.
Layout check_checkpoint(const io::SafeTensors& st,
                        const std::function<std::vector<ExpectedTensor>(bool tied)>& expected);

}  // namespace mmrt::models::qwen2_vl
