#include "models/llava/chat_template.h"

#include "core/error.h"

namespace mmrt::models::llava {

namespace {

// llava-hf/llava-v1.6-mistral-7b-hf's chat_template.
constexpr const char* kMistralTemplate =
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{ '<<SYS>>\\n' + message['content'][0]['text'] + '\\n<</SYS>>\\n\\n' }}"
    "{% elif message['role'] == 'user' %}{{ '[INST] ' }}"
    "{# Render all images first #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\\n' }}{% endfor %}"
    "{# Render all text next #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] }}{% endfor %}{{' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'][0]['text'] + '</s> '}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}{% endfor %}";

// llava-hf/llava-1.5-7b-hf's chat_template.
constexpr const char* kVicunaTemplate =
    "{% for message in messages %}{% if message['role'] != 'system' %}"
    "{{ message['role'].upper() + ': '}}{% endif %}"
    "{# Render all images first #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\\n' }}{% endfor %}"
    "{# Render all text next #}"
    "{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + ' '}}{% endfor %}"
    "{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}";

void images_then_text(const ChatMessage& m, size_t index, std::string& out, std::string* texts,
                      const char* text_suffix) {
  for (const ContentPart& p : m.content) {
    if (p.kind == ContentPart::Kind::kImage) {
      out += "<image>\n";
    } else if (p.kind != ContentPart::Kind::kText) {
      throw Unimplemented("LLaVA takes images and text; chat message " + std::to_string(index) +
                          " has " + (p.kind == ContentPart::Kind::kVideo ? "a video" : "an audio") +
                          " part");
    }
  }
  for (const ContentPart& p : m.content)
    if (p.kind == ContentPart::Kind::kText) texts->append(p.text).append(text_suffix);
}

// The template's message['content'][0]['text']: the first part, which must be text.
const std::string& first_text(const ChatMessage& m, size_t index) {
  if (m.content.empty() || m.content[0].kind != ContentPart::Kind::kText)
    throw InvalidArgument("chat message " + std::to_string(index) + " (" + m.role +
                          "): the LLaVA-NeXT template renders its first part as text");
  return m.content[0].text;
}

}  // namespace

const char* chat_template_jinja(ChatFormat f) {
  return f == ChatFormat::kMistral ? kMistralTemplate : kVicunaTemplate;
}

std::string render_chat(ChatFormat f, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  std::string out = "<s>";  // the tokenizer's BOS (its post-processor adds it in HF)
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    std::string texts;
    if (f == ChatFormat::kMistral) {
      if (m.role == "system") {
        out.append("<<SYS>>\n").append(first_text(m, i)).append("\n<</SYS>>\n\n");
      } else if (m.role == "user") {
        out += "[INST] ";
        images_then_text(m, i, out, &texts, "");
        out.append(texts).append(" [/INST]");
      } else if (m.role == "assistant") {
        out.append(" ").append(first_text(m, i)).append("</s> ");
      } else {
        throw InvalidArgument("chat message " + std::to_string(i) + " has role '" + m.role +
                              "'; the LLaVA-NeXT (Mistral) template takes system, user and "
                              "assistant");
      }
      continue;
    }
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
      throw InvalidArgument("chat message " + std::to_string(i) + " has unknown role '" + m.role +
                            "' (expected system, user, assistant or tool)");
    if (m.role != "system") {
      std::string upper = m.role;
      for (char& c : upper) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c);
      out.append(upper).append(": ");
    }
    images_then_text(m, i, out, &texts, " ");
    out += texts;
  }
  if (f == ChatFormat::kVicuna && add_generation_prompt) out += "ASSISTANT:";
  return out;
}

}  // namespace mmrt::models::llava
