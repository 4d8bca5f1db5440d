// The Unigram model against Hugging Face tokenizers' own Rust library (tokenizers 0.22 through the
// Node binding @anush008/tokenizers, tests/js/hf_tokenize.mjs): identical ids, the post-
// processor's prefix, decode with and without special tokens, on the 6,000-line conformance
// corpus, the hand-written SentencePiece cases and Fuyu's markers as text, for tokenizers in
// Fuyu's layout written by mmrt's Unigram trainer: make-tiny-model's (1,000 pieces), one of
// 8,000 pieces learned from half the corpus, the same without byte fallback (unknown runs fused
// into <unk>), and the Metaspace style. Also the trainer's layout key for key.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/bpe_trainer.h"
#include "io/tokenizer.h"
#include "tokenizer_test_util.h"

using namespace mmrt;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

std::vector<std::string> corpus_lines() {
  std::vector<std::string> v;
  for (const char* f : {"corpus.jsonl", "corpus_sentencepiece.jsonl"}) {
    std::istringstream in(test::read_file(test::source_dir() / "tests/tokenizer/data" / f));
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) v.push_back(json::parse(line).get<std::string>());
  }
  return v;
}

io::SentencePieceUnigramOptions fuyu_options(int32_t vocab, const std::string& style) {
  io::SentencePieceUnigramOptions o;
  o.vocab_size = vocab;
  o.user_pieces = {"|SPEAKER|", "|NEWLINE|", "|ENDOFTEXT|"};
  o.added_specials = {"|ENDOFTEXT|"};
  o.prefix_token = "|ENDOFTEXT|";
  o.style = style;
  return o;
}

bool hf_available() {
  const bool ok =
      std::filesystem::exists(test::source_dir() / "tests/js/node_modules/@anush008/tokenizers");
  EXPECT_TRUE(ok) << "the Hugging Face tokenizers binding is not installed: run scripts/setup.sh "
                     "(it runs `npm ci` in tests/js)";
  return ok;
}

}  // namespace

TEST(UnigramReference, TrainerWritesFuyusLayout) {
  const ojson j = ojson::parse(
      io::train_sentencepiece_unigram(io::builtin_training_corpus(), fuyu_options(1000, "legacy")));
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  // adept/fuyu-8b's tokenizer.json, key for key (its values as that file has them).
  EXPECT_EQ(keys, (std::vector<std::string>{"version", "truncation", "padding", "added_tokens",
                                            "normalizer", "pre_tokenizer", "post_processor",
                                            "decoder", "model"}));
  EXPECT_EQ(j["normalizer"].dump(),
            R"({"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},)"
            R"({"type":"Replace","pattern":{"String":" "},"content":"▁"}]})");
  EXPECT_TRUE(j["pre_tokenizer"].is_null());
  EXPECT_EQ(j["decoder"].dump(),
            R"({"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},)"
            R"("content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip",)"
            R"("content":" ","start":1,"stop":0}]})");
  EXPECT_EQ(
      j["post_processor"]["single"].dump(),
      R"([{"SpecialToken":{"id":"|ENDOFTEXT|","type_id":0}},{"Sequence":{"id":"A","type_id":0}}])");
  std::vector<std::string> model_keys;
  for (const auto& [k, v] : j["model"].items()) model_keys.push_back(k);
  EXPECT_EQ(model_keys, (std::vector<std::string>{"type", "unk_id", "vocab", "byte_fallback"}));
  EXPECT_EQ(j["model"]["type"], "Unigram");
  EXPECT_EQ(j["model"]["unk_id"], 0);
  EXPECT_EQ(j["model"]["byte_fallback"], true);
  const auto& v = j["model"]["vocab"];
  ASSERT_EQ(v.size(), 1000u);
  EXPECT_EQ(v[0].dump(), R"(["<unk>",0.0])");
  EXPECT_EQ(v[3].dump(), R"(["|SPEAKER|",0.0])");
  EXPECT_EQ(v[6 + 0x04].dump(), R"(["<0x04>",0.0])");
  // The learned pieces by score, the most likely first, all below 0.
  for (size_t i = 6 + 256; i + 1 < v.size(); ++i) {
    EXPECT_LT(v[i][1].get<double>(), 0.0) << i;
    EXPECT_GE(v[i][1].get<double>(), v[i + 1][1].get<double>()) << i;
  }
  ASSERT_EQ(j["added_tokens"].size(), 2u);
  EXPECT_EQ(j["added_tokens"][1]["content"], "|ENDOFTEXT|");
  EXPECT_EQ(j["added_tokens"][1]["id"], 5);
}

TEST(UnigramReference, HuggingFaceTokenizersGivesTheSameIdsAndText) {
  if (!hf_available()) return;
  const auto dir = std::filesystem::path(MMRT_BINARY_DIR) / "tokenizer_test";
  std::vector<std::string> texts = corpus_lines();
  ASSERT_GE(texts.size(), 6000u);
  std::string half;
  for (size_t i = 0; i < 3000; ++i) half += texts[i] + "\n";
  for (const char* t : {"|SPEAKER||SPEAKER||NEWLINE|<s>What is in the image?<0x04>",
                        "|SPEAKER| inside text, |ENDOFTEXT| too",
                        "\x04 the raw byte, <0x04> the text", "<unk><s></s>", "<0x0A>\n<0x0a>",
                        "a\xE2\x96\x81"
                        "b \xE2\x96\x81\xE2\x96\x81",
                        "", " ", "  ", "\t"})
    texts.push_back(t);
  const auto texts_path = dir / "unigram_texts.json";
  test::write_file(texts_path, json(texts).dump());

  struct Variant {
    const char* name;
    std::string text;
  };
  std::vector<Variant> variants;
  variants.push_back({"tiny-1000", io::train_sentencepiece_unigram(io::builtin_training_corpus(),
                                                                   fuyu_options(1000, "legacy"))});
  variants.push_back(
      {"corpus-8000", io::train_sentencepiece_unigram(half, fuyu_options(8000, "legacy"))});
  json no_fallback = json::parse(variants.back().text);
  no_fallback["model"]["byte_fallback"] = false;
  variants.push_back({"corpus-8000-unk", no_fallback.dump()});
  variants.push_back({"corpus-8000-metaspace",
                      io::train_sentencepiece_unigram(half, fuyu_options(8000, "metaspace"))});
  for (const Variant& var : variants) {
    SCOPED_TRACE(var.name);
    const auto path = dir / ("unigram_" + std::string(var.name)) / "tokenizer.json";
    test::write_file(path, var.text);
    const io::Tokenizer tok = io::Tokenizer::from_file(path.string());
    const int32_t prefix = *tok.piece_to_id("|ENDOFTEXT|");
    int rc = 0;
    const std::string cmd = "node '" + (test::source_dir() / "tests/js/hf_tokenize.mjs").string() +
                            "' '" + path.string() + "' '" + texts_path.string() + "' 2>&1";
    const std::string out = test::run_command(cmd, rc);
    ASSERT_EQ(rc, 0) << cmd << "\n" << out.substr(0, 2000);
    const json hf = json::parse(out);
    ASSERT_EQ(hf.size(), texts.size());
    size_t bad = 0, n_ids = 0, n_bytes = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto ours = tok.encode(texts[i]);
      const auto want = hf[i]["ids"].get<std::vector<int32_t>>();
      std::vector<int32_t> with_prefix = {prefix};
      with_prefix.insert(with_prefix.end(), ours.begin(), ours.end());
      const bool same = ours == want &&
                        hf[i]["ids_special"].get<std::vector<int32_t>>() == with_prefix &&
                        tok.decode(ours) == hf[i]["decoded"].get<std::string>() &&
                        tok.decode(ours, true) == hf[i]["decoded_skip"].get<std::string>();
      n_ids += ours.size();
      for (int32_t id : ours) n_bytes += tok.id_to_piece(id).starts_with("<0x");
      if (!same && bad++ < 5)
        ADD_FAILURE() << "text #" << i << ": " << texts[i].substr(0, 200) << "\nours "
                      << test::ids_str(ours) << "\nhf   " << test::ids_str(want)
                      << "\nours decoded " << tok.decode(ours) << "\nhf decoded   "
                      << hf[i]["decoded"].get<std::string>();
    }
    EXPECT_EQ(bad, 0u);
    std::printf("[   INFO   ] %s: %zu texts, %zu ids (%zu byte pieces) identical\n", var.name,
                texts.size(), n_ids, n_bytes);
  }
}
