#include "models/qwen2_audio/chat_template.h"

#include "core/error.h"

namespace mmrt::models::qwen2_audio {

const char* chat_template_jinja() {
  return "{% set audio_count = namespace(value=0) %}{% for message in messages %}"
         "{% if loop.first and message['role'] != 'system' %}"
         "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
         "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
         "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
         "{% if 'audio' in content or 'audio_url' in content or message['type'] == 'audio' or "
         "content['type'] == 'audio' %}{% set audio_count.value = audio_count.value + 1 %}"
         "Audio {{ audio_count.value }}: <|audio_bos|><|AUDIO|><|audio_eos|>\n"
         "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
         "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
}

std::string render_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                        const std::string& default_system) {
  std::string out;
  int audio_count = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (i == 0 && m.role != "system")
      out.append("<|im_start|>system\n").append(default_system).append("<|im_end|>\n");
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
      throw InvalidArgument("chat message " + std::to_string(i) + " has unknown role '" + m.role +
                            "' (expected system, user, assistant or tool)");
    out.append("<|im_start|>").append(m.role).append("\n");
    for (const ContentPart& p : m.content) {
      if (p.kind == ContentPart::Kind::kText) {
        out += p.text;
      } else if (p.kind == ContentPart::Kind::kAudio) {
        out.append("Audio ")
            .append(std::to_string(++audio_count))
            .append(": <|audio_bos|><|AUDIO|><|audio_eos|>\n");
      } else {
        throw Unimplemented(std::string("Qwen2-Audio takes audio and text; the chat has ") +
                            (p.kind == ContentPart::Kind::kImage ? "an image" : "a video") +
                            " part");
      }
    }
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace mmrt::models::qwen2_audio
