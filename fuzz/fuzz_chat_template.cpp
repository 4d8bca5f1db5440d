// Chat messages as a request carries them (roles, text, image/video/audio parts), rendered by
// every family's chat template (Qwen2-VL, LLaVA's Mistral and Vicuna formats, Fuyu's prompt ids)
// and tokenised. Input: parts separated by NUL bytes; a part's first byte picks its role, kind
// and whether a part continues the one before. Nothing may crash; a part a family does not take
// is Unimplemented, a role it does not know InvalidArgument.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_tokenizer.h"
#include "models/fuyu/processor.h"
#include "models/llava/chat_template.h"
#include "models/qwen2_vl/chat_template.h"

using namespace mmrt::models;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* roles[] = {"system", "user", "assistant", "tool"};
  std::vector<ChatMessage> msgs;
  qwen2_vl::ChatTemplateOptions opts;
  size_t b = 0;
  for (size_t i = 0; i <= size; ++i) {
    if (i < size && data[i] != 0) continue;
    if (i > b) {
      const uint8_t sel = data[b];
      const std::string text(reinterpret_cast<const char*>(data) + b + 1, i - b - 1);
      if (msgs.empty() || (sel & 0x80)) msgs.push_back({roles[sel & 3], {}});
      const auto kind = static_cast<ContentPart::Kind>((sel >> 2) & 3);
      msgs.back().content.push_back({kind, kind == ContentPart::Kind::kText ? text : ""});
      msgs.back().content.back().continues = (sel & 0x10) != 0;  // a streamed clip's segment
      opts.add_vision_id = (sel & 0x40) != 0;
      opts.add_generation_prompt = (sel & 0x20) != 0;
    }
    b = i + 1;
  }
  const auto each = [](auto&& render) {
    try {
      render();
    } catch (const mmrt::Unimplemented&) {
    } catch (const mmrt::InvalidArgument&) {
    }
  };
  const mmrt::io::Tokenizer& tok = fuzz_tokenizer();
  each([&] { (void)tok.encode(qwen2_vl::render_chat(msgs, opts)); });
  for (auto f : {llava::ChatFormat::kMistral, llava::ChatFormat::kVicuna})
    each([&] { (void)tok.encode(llava::render_chat(f, msgs, opts.add_generation_prompt)); });
  static const auto fuyu = fuyu::make_processor({}, {}, {}, {});
  each([&] { (void)fuyu->chat_ids(tok, msgs, opts.add_generation_prompt); });
  return 0;
}
