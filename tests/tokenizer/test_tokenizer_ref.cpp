// Tokenizer pieces checked against independent implementations run as separate processes:
// Python's UTF-8 replacement decoding, the JavaScript tokenizer on trained files.
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>
#include <random>

#include "io/bpe_trainer.h"
#include "io/tokenizer.h"
#include "io/unicode.h"
#include "tokenizer_test_util.h"

using namespace mmrt;
namespace uc = mmrt::io::unicode;

TEST(Unicode, ReplacementMatchesPython) {
  // Random byte strings biased towards (broken) multi-byte sequences.
  std::mt19937 rng(11);
  const std::vector<uint8_t> interesting = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF,
                                            0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE,
                                            0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF};
  std::vector<std::string> inputs;
  std::string hex;
  for (int i = 0; i < 3000; ++i) {
    std::string s(rng() % 12, '\0');
    for (auto& c : s) c = char(rng() % 3 ? interesting[rng() % interesting.size()] : rng() % 256);
    inputs.push_back(s);
    static const char* digits = "0123456789abcdef";
    for (unsigned char c : s) {
      hex += digits[c >> 4];
      hex += digits[c & 15];
    }
    hex += '\n';
  }
  const auto dir = std::filesystem::path(MMRT_BINARY_DIR) / "tokenizer_test";
  test::write_file(dir / "utf8_in.txt", hex);
  int rc = 0;
  const std::string cmd = std::string(MMRT_REF_PYTHON) + " '" +
                          (test::source_dir() / "tests/tokenizer/utf8_replace_ref.py").string() +
                          "' '" + (dir / "utf8_in.txt").string() + "' '" +
                          (dir / "utf8_out.json").string() + "' 2>&1";
  const std::string out = test::run_command(cmd, rc);
  ASSERT_EQ(rc, 0) << cmd << "\n" << out;
  const auto want = nlohmann::json::parse(test::read_file(dir / "utf8_out.json"));
  ASSERT_EQ(want.size(), inputs.size());
  size_t bad = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string got = uc::sanitize_utf8(inputs[i]);
    if (got != want[i].get<std::string>() && bad++ < 5)
      ADD_FAILURE() << "input #" << i << " differs from Python";
    EXPECT_EQ(uc::is_valid_utf8(inputs[i]), got == inputs[i]);
  }
  EXPECT_EQ(bad, 0u);
}

TEST(BpeTrainer, JavaScriptReferenceGivesTheSameIds) {
  if (!test::require_js_packages()) return;
  const auto dir = std::filesystem::path(MMRT_BINARY_DIR) / "tokenizer_test";
  // Text the trainer saw, text it did not (other scripts, code, specials), and odd characters.
  const std::string text =
      io::builtin_training_corpus() +
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
      "Was ist auf dem Bild? 这是什么？ ᄀ\u1161 e\u0301 \uFFFD \uE000 "
      "🧑🏽\u200D🤝\u200D🧑🏿 \t\t  x   \r\n\r\n 12345 ٣٤<|im_end|>\n";
  test::write_file(dir / "trainer_text.txt", text);
  for (int32_t vocab : {300, 1000, 3000}) {
    SCOPED_TRACE("vocab_size " + std::to_string(vocab));
    io::BpeTrainOptions o;
    o.vocab_size = vocab;
    o.special_tokens = mmrt::test::qwen2_specials();
    const std::string json_text = io::train_byte_level_bpe(io::builtin_training_corpus(), o);
    const auto path = dir / ("trained_" + std::to_string(vocab) + "/tokenizer.json");
    test::write_file(path, json_text);
    const io::Tokenizer tok = io::Tokenizer::from_file(path.string());
    const std::vector<int32_t> ours = tok.encode(text);
    const std::vector<int32_t> js = test::js_encode_file(path, dir / "trainer_text.txt");
    EXPECT_EQ(ours, js) << "ours " << test::ids_str(ours) << "\njs   " << test::ids_str(js);
    EXPECT_EQ(tok.decode(ours), io::unicode::nfc(text));
  }
}
