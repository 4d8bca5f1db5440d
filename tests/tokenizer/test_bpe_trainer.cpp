// BPE trainer: hand-checked merges, the Qwen2 file layout, special-token ids (the trained file
// against the JavaScript reference: test_tokenizer_ref.cpp).
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/bpe_trainer.h"
#include "io/tokenizer.h"
#include "io/unicode.h"
#include "tokenizer_test_util.h"

using namespace mmrt;
using nlohmann::json;

TEST(BpeTrainer, MostFrequentPairFirst) {
  io::BpeTrainOptions o;
  o.vocab_size = 259;
  // One piece "abababab": (a b) x4 beats (b a) x3; then (ab ab) x3; then (abab abab) x1.
  const json j = json::parse(io::train_byte_level_bpe("abababab", o));
  EXPECT_EQ(j["model"]["merges"], json::array({"a b", "ab ab", "abab abab"}));
  EXPECT_EQ(j["model"]["vocab"]["abababab"], 258);
  EXPECT_EQ(j["model"]["vocab"]["!"], 0);    // byte tokens in alphabet order, as in Qwen2
  EXPECT_EQ(j["model"]["vocab"]["Ġ"], 220);  // the space byte
  EXPECT_EQ(j["model"]["vocab"]["Ċ"], 198);  // the newline byte
  EXPECT_EQ(j["added_tokens"], json::array());
  // Training stops when no pair is left, below vocab_size.
  o.vocab_size = 400;
  EXPECT_EQ(json::parse(io::train_byte_level_bpe("abababab", o))["model"]["merges"].size(), 3u);
}

TEST(BpeTrainer, WritesTheQwen2Layout) {
  io::BpeTrainOptions o;
  o.vocab_size = 2000;
  o.special_tokens = mmrt::test::qwen2_specials();
  const std::string text = io::train_byte_level_bpe(io::builtin_training_corpus(), o);
  EXPECT_EQ(text, io::train_byte_level_bpe(io::builtin_training_corpus(), o));  // deterministic
  const json j = json::parse(text);
  EXPECT_EQ(j["normalizer"], json::parse(R"({"type":"NFC"})"));
  const json& pre = j["pre_tokenizer"];
  EXPECT_EQ(pre["type"], "Sequence");
  ASSERT_EQ(pre["pretokenizers"].size(), 2u);
  EXPECT_EQ(pre["pretokenizers"][0]["type"], "Split");
  EXPECT_EQ(pre["pretokenizers"][0]["pattern"]["Regex"],
            std::string(io::unicode::kQwen2SplitPattern));
  EXPECT_EQ(pre["pretokenizers"][0]["behavior"], "Isolated");
  EXPECT_EQ(pre["pretokenizers"][0]["invert"], false);
  EXPECT_EQ(pre["pretokenizers"][1]["type"], "ByteLevel");
  EXPECT_EQ(pre["pretokenizers"][1]["add_prefix_space"], false);
  EXPECT_EQ(pre["pretokenizers"][1]["use_regex"], false);
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["model"]["vocab"].size(), 2000u);
  EXPECT_EQ(j["model"]["merges"].size(), 2000u - 256u);
  ASSERT_EQ(j["added_tokens"].size(), 14u);
  for (size_t k = 0; k < 14; ++k) {
    const json& t = j["added_tokens"][k];
    EXPECT_EQ(t["id"], 2000 + int(k));
    EXPECT_EQ(t["content"], mmrt::test::qwen2_specials()[k]);
    EXPECT_EQ(t["special"], true);
    EXPECT_EQ(t["normalized"], false);
    EXPECT_EQ(t["lstrip"], false);
    EXPECT_EQ(t["rstrip"], false);
  }
  EXPECT_EQ(mmrt::test::qwen2_specials().front(), "<|endoftext|>");
  EXPECT_EQ(mmrt::test::qwen2_specials()[1], "<|im_start|>");
  EXPECT_EQ(mmrt::test::qwen2_specials().back(), "<|video_pad|>");

  // It loads, round-trips text and compresses it.
  const io::Tokenizer tok = io::Tokenizer::from_json(text, "trained");
  EXPECT_EQ(tok.vocab_size(), 2014);
  EXPECT_EQ(tok.piece_to_id("<|im_end|>"), 2002);
  EXPECT_TRUE(tok.is_special(2013));
  const std::string& corpus = io::builtin_training_corpus();
  const auto ids = tok.encode(corpus);
  EXPECT_EQ(tok.decode(ids), io::unicode::nfc(corpus));
  EXPECT_LT(ids.size() * 3, corpus.size());
  const std::string chat = "<|im_start|>user\nHello 世界 👋🏽<|im_end|>\n";
  const auto chat_ids = tok.encode(chat);
  EXPECT_EQ(chat_ids.front(), 2001);
  EXPECT_EQ(tok.decode(chat_ids), chat);
}

TEST(BpeTrainer, SpecialFirstIdKeepsQwenIds) {
  io::BpeTrainOptions o;
  o.vocab_size = 500;
  o.special_tokens = mmrt::test::qwen2_specials();
  o.special_first_id = 151643;
  const io::Tokenizer tok =
      io::Tokenizer::from_json(io::train_byte_level_bpe(io::builtin_training_corpus(), o), "t");
  EXPECT_EQ(tok.vocab_size(), 151657);
  EXPECT_EQ(tok.piece_to_id("<|endoftext|>"), 151643);
  EXPECT_EQ(tok.piece_to_id("<|vision_start|>"), 151652);
  EXPECT_EQ(tok.piece_to_id("<|image_pad|>"), 151655);
  EXPECT_EQ(tok.piece_to_id("<|video_pad|>"), 151656);
  EXPECT_EQ(tok.encode("<|vision_start|><|image_pad|><|vision_end|>"),
            (std::vector<int32_t>{151652, 151655, 151653}));
  EXPECT_THROW(tok.decode({1000}), InvalidArgument);  // inside the gap
}

TEST(BpeTrainer, RejectsBadOptions) {
  io::BpeTrainOptions o;
  o.vocab_size = 100;
  EXPECT_THROW(io::train_byte_level_bpe("abc", o), InvalidArgument);
  o.vocab_size = 300;
  o.special_first_id = 299;
  EXPECT_THROW(io::train_byte_level_bpe("abc", o), InvalidArgument);
  o.special_first_id = -1;
  o.special_tokens = {"<a>", "<a>"};
  EXPECT_THROW(io::train_byte_level_bpe("abc", o), InvalidArgument);
  o.special_tokens = {""};
  EXPECT_THROW(io::train_byte_level_bpe("abc", o), InvalidArgument);
}
