// The Qwen2-Audio chat template (the Jinja template of Qwen2AudioProcessor / the checkpoint's
// tokenizer_config.json), rendered natively: no template engine on the request path.
#pragma once

#include <string>
#include <vector>

#include "models/model.h"

namespace mmrt::models::qwen2_audio {

// The template text written into tokenizer_config.json by make-tiny-model (HF's current
// Qwen2AudioProcessor default, which also accepts {"type": "audio"} parts).
const char* chat_template_jinja();

// A default system turn when the conversation does not start with one, then
// <|im_start|>{role}\n{content}<|im_end|>\n per message, where each audio part renders as
// "Audio {n}: <|audio_bos|><|AUDIO|><|audio_eos|>\n" (n counts from 1 over the conversation; one
// <|AUDIO|>, which the processor expands) and text as is; <|im_start|>assistant\n as the
// generation prompt. InvalidArgument for an unknown role, Unimplemented for an image or video.
std::string render_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                        const std::string& default_system = "You are a helpful assistant.");

}  // namespace mmrt::models::qwen2_audio
