// The native Qwen2-VL chat template against the real Jinja template rendered by jinja2
// (tests/reference/chat_template_ref.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "models/qwen2_vl/chat_template.h"

using namespace mmrt;
using namespace mmrt::models;
using namespace mmrt::models::qwen2_vl;
using json = nlohmann::json;

namespace {

json run_reference(const json& requests) {
  std::string in = testing::TempDir() + "chat_req.json";
  std::string out = testing::TempDir() + "chat_out.txt";
  std::ofstream(in) << requests.dump();
  std::string cmd = std::string(MMRT_REF_PYTHON) + " " + MMRT_SOURCE_DIR +
                    "/tests/reference/chat_template_ref.py < " + in + " > " + out;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  return json::parse(f);
}

json to_hf(const std::vector<ChatMessage>& msgs, bool string_content) {
  json arr = json::array();
  for (const auto& m : msgs) {
    json jm{{"role", m.role}};
    if (string_content && m.content.size() == 1 && m.content[0].kind == ContentPart::Kind::kText) {
      jm["content"] = m.content[0].text;
    } else {
      json parts = json::array();
      for (const auto& p : m.content) {
        if (p.kind == ContentPart::Kind::kText)
          parts.push_back({{"type", "text"}, {"text", p.text}});
        if (p.kind == ContentPart::Kind::kImage) parts.push_back({{"type", "image"}});
        if (p.kind == ContentPart::Kind::kVideo) parts.push_back({{"type", "video"}});
      }
      jm["content"] = parts;
    }
    arr.push_back(jm);
  }
  return arr;
}

ChatMessage multimodal(std::string role, std::vector<ContentPart> parts) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(parts);
  return m;
}

using K = ContentPart::Kind;

}  // namespace

TEST(ChatTemplate, MatchesJinjaReference) {
  std::vector<std::vector<ChatMessage>> cases = {
      {ChatMessage::text("user", "Hello!")},
      {ChatMessage::text("system", "Be terse."), ChatMessage::text("user", "2+2?")},
      {ChatMessage::text("user", "Hi"), ChatMessage::text("assistant", "Hello, how can I help?"),
       ChatMessage::text("user", "Tell me a joke\nwith two lines.")},
      {multimodal("user", {{K::kImage, ""}, {K::kText, "Describe the picture."}})},
      {multimodal("user", {{K::kText, "Compare "},
                           {K::kImage, ""},
                           {K::kText, " and "},
                           {K::kImage, ""},
                           {K::kText, "."}}),
       ChatMessage::text("assistant", "The first is brighter."),
       multimodal("user", {{K::kVideo, ""}, {K::kText, "And this clip?"}})},
      {ChatMessage::text("user", "  spaces\t\tand unicode: 你好 🙂  ")},
  };
  json requests = json::array();
  std::vector<std::string> got, labels;
  for (bool gen : {true, false}) {
    for (bool vid : {false, true}) {
      for (bool str : {true, false}) {
        for (size_t i = 0; i < cases.size(); ++i) {
          requests.push_back({{"messages", to_hf(cases[i], str)},
                              {"add_generation_prompt", gen},
                              {"add_vision_id", vid}});
          got.push_back(
              render_chat(cases[i], {.add_generation_prompt = gen, .add_vision_id = vid}));
          labels.push_back("case " + std::to_string(i) + " gen=" + std::to_string(gen) +
                           " vision_id=" + std::to_string(vid));
        }
      }
    }
  }
  json want = run_reference(requests);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i], want[i].get<std::string>()) << labels[i];
}

TEST(ChatTemplate, RejectsUnknownRole) {
  EXPECT_THROW(render_chat({ChatMessage::text("robot", "beep")}), InvalidArgument);
}
