// LLaVA's chat templates, rendered in C++ exactly as the llava-hf checkpoints' Jinja templates
// render (tests compare with jinja2): kMistral, LLaVA-NeXT on Mistral ("[INST] <image>\n...
// [/INST]"), and kVicuna, LLaVA-1.5 ("USER: <image>\n... ASSISTANT:"). Images of a message come
// before its text, one "<image>\n" each, as the templates put them. The rendered text starts with
// "<s>": the HF processor's tokenizer call adds BOS, mmrt's tokenizer adds no specials.
#pragma once

#include <string>
#include <vector>

#include "models/model.h"

namespace mmrt::models::llava {

enum class ChatFormat { kMistral, kVicuna };

// The Jinja source of the format's template (what make-tiny-model writes to
// tokenizer_config.json's chat_template).
const char* chat_template_jinja(ChatFormat f);

// InvalidArgument for a role the template refuses, Unimplemented for a video or audio part.
std::string render_chat(ChatFormat f, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);

}  // namespace mmrt::models::llava
