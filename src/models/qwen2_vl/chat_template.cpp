#include "models/qwen2_vl/chat_template.h"

#include "core/error.h"

namespace mmrt::models::qwen2_vl {

std::string render_chat(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& opts) {
  std::string out;
  int image_count = 0, video_count = 0;
  if (!messages.empty() && messages.front().role != "system")
    out += "<|im_start|>system\n" + opts.default_system + "<|im_end|>\n";
  for (const auto& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
      throw InvalidArgument("chat message has unknown role '" + m.role +
                            "' (expected system, user, assistant or tool)");
    out += "<|im_start|>" + m.role + "\n";
    for (size_t k = 0; k < m.content.size(); ++k) {
      const ContentPart& p = m.content[k];
      if (p.continues) {
        // Inside the previous video's <|vision_start|> ... <|vision_end|>: its pad run goes on.
        static const std::string kEnd = "<|vision_end|>";
        if (p.kind != ContentPart::Kind::kVideo || k == 0 ||
            m.content[k - 1].kind != ContentPart::Kind::kVideo)
          throw InvalidArgument(
              "a continuing media part must be a video right after a video "
              "part of the same message");
        out.resize(out.size() - kEnd.size());
        out += "<|video_pad|>" + kEnd;
        continue;
      }
      switch (p.kind) {
        case ContentPart::Kind::kText:
          out += p.text;
          break;
        case ContentPart::Kind::kImage:
          ++image_count;
          if (opts.add_vision_id) out += "Picture " + std::to_string(image_count) + ": ";
          out += "<|vision_start|><|image_pad|><|vision_end|>";
          break;
        case ContentPart::Kind::kVideo:
          ++video_count;
          if (opts.add_vision_id) out += "Video " + std::to_string(video_count) + ": ";
          out += "<|vision_start|><|video_pad|><|vision_end|>";
          break;
        case ContentPart::Kind::kAudio:
          throw Unimplemented("Qwen2-VL takes no audio: the chat has an audio part");
      }
    }
    out += "<|im_end|>\n";
  }
  if (opts.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace mmrt::models::qwen2_vl
