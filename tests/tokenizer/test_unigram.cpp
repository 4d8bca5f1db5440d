// The Unigram model (Fuyu's tokenizer.json) on hand-built vocabularies whose best segmentations
// are worked out below: Viterbi over the scores, ties kept by the first offer (the order Hugging
// Face tokenizers visits the lattice), control pieces matched as text, unknown characters fused
// and turned into <0xNN> bytes or <unk>, added tokens split first, the SentencePiece decoder, and
// load errors naming the field. The conformance with Hugging Face tokenizers itself on 6,000
// lines is test_conformance.cpp's.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/tokenizer.h"

using namespace mmrt;
using nlohmann::json;

namespace {

const std::string U = "\u2581";

int32_t byte_id(int b) {
  return 3 + b;
}

// <unk> 0, <s> 1, </s> 2 (score 0, as Fuyu's), <0x00>..<0xFF> 3..258 (score 0), then
// "▁" 259 -1, "a" 260 -2, "b" 261 -2, "▁a" 262 -2.5, "ab" 263 -2, "▁ab" 264 -5, "c" 265 -3,
// "bc" 266 -2.5. The lowest score is -5, so an unknown character costs -15. Fuyu's layout:
// <unk> the only added token, Prepend + Replace normaliser, no pre-tokenizer.
json unigram_json() {
  json vocab = json::array({{"<unk>", 0.0}, {"<s>", 0.0}, {"</s>", 0.0}});
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab.push_back({name, 0.0});
  }
  for (const auto& [p, s] : std::vector<std::pair<std::string, double>>{{U, -1.0},
                                                                        {"a", -2.0},
                                                                        {"b", -2.0},
                                                                        {U + "a", -2.5},
                                                                        {"ab", -2.0},
                                                                        {U + "ab", -5.0},
                                                                        {"c", -3.0},
                                                                        {"bc", -2.5}})
    vocab.push_back({p, s});
  json j;
  j["added_tokens"] = json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}}});
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Prepend"}, {"prepend", U}},
                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", U}}}}};
  j["pre_tokenizer"] = nullptr;
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", U}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  j["model"] = {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}, {"byte_fallback", true}};
  return j;
}

io::Tokenizer load(const json& j) {
  return io::Tokenizer::from_json(j.dump(), "unigram/tokenizer.json");
}

std::string load_error(const std::function<void(json&)>& edit) {
  json j = unigram_json();
  edit(j);
  try {
    load(j);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(TokenizerUnigram, ViterbiPicksTheBestScoringSegmentation) {
  const io::Tokenizer tok = load(unigram_json());
  // "▁ab": ▁ab -5, ▁a+b -4.5, ▁+a+b -5, ▁+ab -3: the last.
  EXPECT_EQ(tok.encode("ab"), (std::vector<int32_t>{259, 263}));
  // "▁abc": ▁+ab+c -6, ▁+a+bc -5.5, ▁a+bc -5, ▁ab+c -8: ▁a+bc.
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{262, 266}));
  // Spaces are ▁: "▁ab▁c" = ▁+ab, ▁+c.
  EXPECT_EQ(tok.encode("ab c"), (std::vector<int32_t>{259, 263, 259, 265}));
  EXPECT_EQ(tok.encode(""), std::vector<int32_t>{});
  // The control pieces are vocabulary strings (score 0) and match as text, as in Hugging Face;
  // only added tokens are split out first, each section getting its own ▁.
  EXPECT_EQ(tok.encode("<s>"), (std::vector<int32_t>{259, 1}));
  EXPECT_EQ(tok.encode("a<unk>b"), (std::vector<int32_t>{262, 0, 259, 261}));
  EXPECT_EQ(tok.decode({262, 266}), "abc");  // the prepended space is stripped
  EXPECT_EQ(tok.decode({259, 263, 259, 265}), "ab c");
  EXPECT_EQ(tok.token_bytes(262), " a");
}

TEST(TokenizerUnigram, UnknownCharactersFuseThenFallBackToBytesOrUnk) {
  const io::Tokenizer tok = load(unigram_json());
  // "é" and "è" have no piece: each costs -15; the run fuses into one piece whose UTF-8 bytes
  // become <0xNN> tokens.
  EXPECT_EQ(tok.encode("aé"), (std::vector<int32_t>{262, byte_id(0xC3), byte_id(0xA9)}));
  EXPECT_EQ(tok.encode("éèa"), (std::vector<int32_t>{259, byte_id(0xC3), byte_id(0xA9),
                                                     byte_id(0xC3), byte_id(0xA8), 260}));
  EXPECT_EQ(tok.decode(tok.encode("éèa")), "éèa");
  io::StreamingDetokenizer s(tok);
  std::string got;
  for (int32_t id : tok.encode("aéb")) got += s.push(id);
  got += s.flush();
  EXPECT_EQ(got, "aéb");
  // Without byte fallback a fused run is one <unk>.
  json j = unigram_json();
  j["model"]["byte_fallback"] = false;
  EXPECT_EQ(load(j).encode("éèa"), (std::vector<int32_t>{259, 0, 260}));
  EXPECT_EQ(load(j).encode("aé"), (std::vector<int32_t>{262, 0}));
}

TEST(TokenizerUnigram, TiesKeepTheFirstOffer) {
  // "▁a" -2 against "▁" -1 + "a" -1: equal; the lattice hears from start 0 first (▁a ends at
  // the same place as ▁+a, offered later from start 3), so the one piece stays.
  json j = unigram_json();
  auto& v = j["model"]["vocab"];
  v[259][1] = -1.0;
  v[260][1] = -1.0;
  v[262][1] = -2.0;
  EXPECT_EQ(load(j).encode("a"), (std::vector<int32_t>{262}));
  // Make ▁+a strictly better and it wins.
  v[260][1] = -0.5;
  EXPECT_EQ(load(j).encode("a"), (std::vector<int32_t>{259, 260}));
  // A repeated string takes its last id (Hugging Face's token map), and its score.
  v.push_back({"c", -0.1});
  EXPECT_EQ(load(j).encode("c"), (std::vector<int32_t>{259, 267}));
  EXPECT_EQ(*load(j).piece_to_id("c"), 267);
}

TEST(TokenizerUnigram, LoadErrorsNameTheField) {
  auto has = [](const std::string& m, const std::string& part) {
    return m.find("unigram/tokenizer.json") != std::string::npos &&
           m.find(part) != std::string::npos;
  };
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["vocab"][5] = json::array({"x"}); }),
               "model.vocab[5]");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["vocab"][7][1] = "high"; }),
               "model.vocab[7]");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["vocab"][7] = 3; }), "model.vocab[7]");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["vocab"] = json::array(); }),
               "model.vocab is empty");
  EXPECT_PRED2(has, load_error([](json& j) {
                 j["model"]["vocab"] = {{"a", 0}};
               }),
               "must be an array");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"].erase("unk_id"); }), "model.unk_id");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["unk_id"] = 9999; }),
               "model.unk_id = 9999");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["merges"] = json::array(); }),
               "model.merges in a Unigram model");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["vocab"].erase(3 + 0x41); }), "no <0x41>");
  EXPECT_PRED2(has, load_error([](json& j) {
                 j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
               }),
               "Unigram model with a ByteLevel pre-tokenizer");
  // A BPE model does not take the array form.
  EXPECT_PRED2(has, load_error([](json& j) {
                 j["model"]["type"] = "BPE";
                 j["model"]["merges"] = json::array();
               }),
               "model.vocab missing or not an object");
}
