// The Qwen2-VL instruct chat template (the Jinja template shipped in tokenizer_config.json,
// rendered natively: no template engine on the request path).
#pragma once

#include <string>
#include <vector>

#include "models/model.h"

namespace mmrt::models::qwen2_vl {

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  bool add_vision_id = false;  // "Picture N: " / "Video N: " before each media item
  std::string default_system = "You are a helpful assistant.";
};

// <|im_start|>{role}\n{content}<|im_end|>\n per message, a default system message first when the
// conversation has none, images as <|vision_start|><|image_pad|><|vision_end|> (one pad token;
// the processor expands it), videos likewise with <|video_pad|>, and <|im_start|>assistant\n as
// the generation prompt. Unimplemented for an audio part (Qwen2-VL takes none).
std::string render_chat(const std::vector<ChatMessage>& messages,
                        const ChatTemplateOptions& opts = {});

}  // namespace mmrt::models::qwen2_vl
