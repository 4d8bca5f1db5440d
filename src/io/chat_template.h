// Chat messages and the Qwen2-VL instruct chat template (the Jinja template shipped in
// tokenizer_config.json, rendered natively: no template engine on the request path).
#pragma once

#include <string>
#include <vector>

namespace mmrt::io {

struct ContentPart {
  enum class Kind { kText, kImage, kVideo };
  Kind kind = Kind::kText;
  std::string text;  // for kText
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::vector<ContentPart> content;
  static ChatMessage text(std::string role, std::string text);
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  bool add_vision_id = false;  // "Picture N: " / "Video N: " before each media item
  std::string default_system = "You are a helpful assistant.";
};

// <|im_start|>{role}\n{content}<|im_end|>\n per message, a default system message first when the
// conversation has none, images as <|vision_start|><|image_pad|><|vision_end|> (one pad token;
// the processor expands it), and <|im_start|>assistant\n as the generation prompt.
std::string render_qwen2_vl_chat(const std::vector<ChatMessage>& messages,
                                 const ChatTemplateOptions& opts = {});

}  // namespace mmrt::io
