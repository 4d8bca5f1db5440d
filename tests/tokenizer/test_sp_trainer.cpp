// SentencePiece-style BPE trainer: the fixed Llama / Mistral layout, loading and exact round trips
// (byte fallback for characters outside the vocabulary), specials, both styles, determinism, bad
// options, and the make-tiny-model helper's SentencePiece tokenizer and gap fill (the trained file
// against the JavaScript reference and the real Llama-2 file: test_sp_trainer_ref.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/bpe_trainer.h"
#include "io/tokenizer.h"
#include "io/unicode.h"
#include "models/tiny_common.h"
#include "tokenizer_test_util.h"

using namespace mmrt;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

const std::string kSp = "\xE2\x96\x81";  // U+2581

std::string train(const std::string& corpus, int32_t vocab, const std::string& style = "legacy",
                  std::vector<std::string> specials = {}, int32_t first = -1) {
  io::SentencePieceTrainOptions o;
  o.vocab_size = vocab;
  o.style = style;
  o.special_tokens = std::move(specials);
  o.special_first_id = first;
  return io::train_sentencepiece_bpe(corpus, o);
}

std::vector<std::string> chars_of(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::max<size_t>(1, io::unicode::utf8_next(std::string_view(s).substr(i)).len);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e; (e = s.find('\n', b)) != std::string::npos; b = e + 1)
    out.push_back(s.substr(b, e - b));
  out.push_back(s.substr(b));
  return out;
}

std::string byte_name(unsigned b) {
  char n[8];
  std::snprintf(n, sizeof(n), "<0x%02X>", b);
  return n;
}

// Whether "▁" occurs in `piece` only in a leading run (never after another character).
bool spaces_only_lead(const std::string& piece) {
  bool word = false;
  for (const auto& c : chars_of(piece)) {
    if (c == kSp && word) return false;
    word = word || c != kSp;
  }
  return true;
}

bool is_control(const std::string& ch) {
  const uint32_t cp = io::unicode::utf8_next(ch).cp;
  return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F);
}

// The ids a text of characters outside the vocabulary (and spaces) must encode to in the legacy
// style: "▁" for each space and one before the text, the <0xNN> byte tokens for the rest.
std::vector<int32_t> fallback_ids(const io::Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids = {*tok.piece_to_id(kSp)};
  for (const auto& c : chars_of(text)) {
    if (c == " ") {
      ids.push_back(*tok.piece_to_id(kSp));
      continue;
    }
    for (unsigned char b : c) ids.push_back(3 + b);
  }
  return ids;
}

// What decode(encode(text)) gives, as in Hugging Face: the text itself, but the legacy normaliser
// prepends "▁" to every section after an added token too (decoded as a space), and with
// Metaspace "first" a leading space is taken for the prepended one (removed by the Strip).
std::string expected_round_trip(const std::string& text, const std::string& style) {
  if (style == "metaspace") return text.starts_with(' ') ? text.substr(1) : text;
  const std::vector<std::string> added = {"<unk>", "<s>", "</s>", "<image>", "<pad>"};
  const auto added_at = [&](size_t i) {
    size_t n = 0;
    for (const auto& a : added)
      if (text.compare(i, a.size(), a) == 0) n = std::max(n, a.size());
    return n;
  };
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const size_t n = added_at(i);
    if (n == 0) {
      out += text[i++];
      continue;
    }
    out += text.substr(i, n);
    i += n;
    if (i < text.size() && added_at(i) == 0) out += ' ';
  }
  return out;
}

}  // namespace

TEST(SpTrainer, WritesTheLlamaLayout) {
  const std::string text =
      train(io::builtin_training_corpus(), 1000, "legacy", {"<image>", "<pad>"});
  const ojson j = ojson::parse(text);
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"version", "truncation", "padding", "added_tokens",
                                            "normalizer", "pre_tokenizer", "post_processor",
                                            "decoder", "model"}));
  EXPECT_EQ(j["version"], "1.0");
  EXPECT_TRUE(j["truncation"].is_null());
  EXPECT_TRUE(j["padding"].is_null());

  const ojson& added = j["added_tokens"];
  ASSERT_EQ(added.size(), 5u);
  const std::vector<std::pair<int, std::string>> want_added = {
      {0, "<unk>"}, {1, "<s>"}, {2, "</s>"}, {1000, "<image>"}, {1001, "<pad>"}};
  for (size_t k = 0; k < 5; ++k) {
    const ojson& t = added[k];
    EXPECT_EQ(t["id"], want_added[k].first);
    EXPECT_EQ(t["content"], want_added[k].second);
    for (const char* f : {"single_word", "lstrip", "rstrip", "normalized"}) EXPECT_EQ(t[f], false);
    EXPECT_EQ(t["special"], true);
  }

  EXPECT_EQ(json::parse(j["normalizer"].dump()), json::parse(R"({"type": "Sequence", "normalizers":
      [{"type": "Prepend", "prepend": "▁"},
       {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})"));
  EXPECT_TRUE(j["pre_tokenizer"].is_null());
  EXPECT_EQ(json::parse(j["post_processor"].dump()), json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}})"));
  EXPECT_EQ(json::parse(j["decoder"].dump()), json::parse(R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
      {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})"));

  const ojson& m = j["model"];
  std::vector<std::string> model_keys;
  for (const auto& [k, v] : m.items()) model_keys.push_back(k);
  EXPECT_EQ(model_keys,
            (std::vector<std::string>{"type", "dropout", "unk_token", "continuing_subword_prefix",
                                      "end_of_word_suffix", "fuse_unk", "byte_fallback",
                                      "ignore_merges", "vocab", "merges"}));
  EXPECT_EQ(m["type"], "BPE");
  EXPECT_TRUE(m["dropout"].is_null());
  EXPECT_EQ(m["unk_token"], "<unk>");
  EXPECT_TRUE(m["continuing_subword_prefix"].is_null());
  EXPECT_TRUE(m["end_of_word_suffix"].is_null());
  EXPECT_EQ(m["fuse_unk"], true);
  EXPECT_EQ(m["byte_fallback"], true);
  EXPECT_EQ(m["ignore_merges"], false);

  // The vocabulary in id order: the fixed ids, then characters by frequency, then merges.
  const ojson& vocab = m["vocab"];
  ASSERT_EQ(vocab.size(), 1000u);
  std::vector<std::string> piece;
  for (const auto& [p, id] : vocab.items()) {
    EXPECT_EQ(id, int(piece.size())) << p;
    piece.push_back(p);
  }
  EXPECT_EQ(piece[0], "<unk>");
  EXPECT_EQ(piece[1], "<s>");
  EXPECT_EQ(piece[2], "</s>");
  for (unsigned b = 0; b < 256; ++b) EXPECT_EQ(piece[3 + b], byte_name(b));

  // Character counts of the text the tokenizer sees ("▁" for spaces, one prepended).
  std::map<std::string, int64_t> count;
  ++count[kSp];
  for (const auto& c : chars_of(io::builtin_training_corpus())) ++count[c == " " ? kSp : c];
  size_t first_merged = 259;
  while (first_merged < piece.size() && chars_of(piece[first_merged]).size() == 1) ++first_merged;
  EXPECT_LT(first_merged, piece.size()) << "no merges learned";
  size_t n_chars = 0;
  for (const auto& [c, n] : count) n_chars += !is_control(c);
  EXPECT_EQ(first_merged - 259, n_chars);  // every character of the corpus but the controls
  EXPECT_EQ(piece[259], kSp);              // the most frequent character
  for (size_t id = 260; id < first_merged; ++id) {
    EXPECT_FALSE(is_control(piece[id])) << id;
    EXPECT_GE(count[piece[id - 1]], count[piece[id]]) << "characters not by frequency at " << id;
  }

  // Merges: "a b" strings over vocabulary pieces, in the order the merged pieces got their ids.
  const ojson& merges = m["merges"];
  ASSERT_GT(merges.size(), 0u);
  std::map<std::string, int> id_of;
  for (size_t id = 0; id < piece.size(); ++id) id_of[piece[id]] = int(id);
  int last_new = int(first_merged) - 1;
  for (const auto& mg : merges) {
    ASSERT_TRUE(mg.is_string());
    const std::string s = mg.get<std::string>();
    const size_t sp = s.find(' ');
    ASSERT_NE(sp, std::string::npos) << s;
    EXPECT_EQ(s.find(' ', sp + 1), std::string::npos) << s;
    const std::string a = s.substr(0, sp), b = s.substr(sp + 1);
    ASSERT_TRUE(id_of.count(a) && id_of.count(b) && id_of.count(a + b)) << s;
    EXPECT_GE(id_of[a], 259) << s;
    EXPECT_GE(id_of[b], 259) << s;
    EXPECT_LE(id_of[a + b], last_new + 1) << "merged pieces get ids in merge order: " << s;
    last_new = std::max(last_new, id_of[a + b]);
  }
  // Merged pieces: at most 16 characters, "▁" only in a leading run, no control characters.
  for (size_t id = first_merged; id < piece.size(); ++id) {
    const auto cs = chars_of(piece[id]);
    EXPECT_LE(cs.size(), 16u) << piece[id];
    for (const auto& c : cs) EXPECT_FALSE(is_control(c)) << piece[id];
    EXPECT_TRUE(spaces_only_lead(piece[id])) << piece[id];
  }
}

TEST(SpTrainer, LoadsAndRoundTripsInBothStyles) {
  const std::string& corpus = io::builtin_training_corpus();
  for (const std::string style : {"legacy", "metaspace"}) {
    SCOPED_TRACE(style);
    const std::string text = train(corpus, 2000, style, {"<image>", "<pad>"});
    const io::Tokenizer tok = io::Tokenizer::from_json(text, "trained");
    EXPECT_EQ(tok.vocab_size(), 2002);
    EXPECT_EQ(tok.id_to_piece(0), "<unk>");
    EXPECT_EQ(tok.id_to_piece(1), "<s>");
    EXPECT_EQ(tok.id_to_piece(2), "</s>");
    for (unsigned b = 0; b < 256; ++b) {
      EXPECT_EQ(tok.id_to_piece(3 + b), byte_name(b));
      EXPECT_EQ(tok.token_bytes(3 + b), std::string(1, char(b)));
    }
    for (int id : {0, 1, 2, 2000, 2001}) EXPECT_TRUE(tok.is_special(id)) << id;
    EXPECT_FALSE(tok.is_special(3));
    EXPECT_EQ(tok.piece_to_id("<image>"), 2000);
    EXPECT_EQ(tok.piece_to_id("<pad>"), 2001);
    EXPECT_EQ(tok.leading_spaces_stripped(), 1);

    size_t n_lines = 0;
    for (const auto& line : lines_of(corpus)) {
      if (line.empty()) continue;
      ++n_lines;
      const auto ids = tok.encode(line);
      EXPECT_EQ(tok.decode(ids), expected_round_trip(line, style)) << line;
      EXPECT_EQ(std::count(ids.begin(), ids.end(), 0), 0) << "<unk> in " << line;
    }
    EXPECT_GT(n_lines, 50u);
    const auto ids = tok.encode(corpus);
    EXPECT_EQ(tok.decode(ids), expected_round_trip(corpus, style));
    // Merges compress: fewer tokens than characters; newline, tab and CR are bytes.
    EXPECT_LT(ids.size() * 2, chars_of(corpus).size());
    EXPECT_GT(std::count(ids.begin(), ids.end(), 3 + '\n'), 50);
    EXPECT_GT(std::count(ids.begin(), ids.end(), 3 + '\t'), 5);
    EXPECT_GT(std::count(ids.begin(), ids.end(), 3 + '\r'), 2);
    io::StreamingDetokenizer stream(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, tok.decode(ids, /*skip_special=*/true));
  }
}

TEST(SpTrainer, CharactersOutsideTheVocabularyUseByteFallback) {
  const io::Tokenizer tok =
      io::Tokenizer::from_json(train(io::builtin_training_corpus(), 1000), "trained");
  // Characters the corpus does not have: a rare CJK ideograph, an emoji, a math letter, a
  // combining mark, and the controls, which never join the vocabulary.
  const std::string unseen = "\xE9\xBE\x98 \xF0\x9F\xA6\x9C \xF0\x9D\x94\x98\xCC\x81 \t\n\r\x01";
  for (const auto& c : chars_of(unseen))
    EXPECT_TRUE(c == " " || !tok.piece_to_id(c).has_value()) << c;
  EXPECT_EQ(tok.encode(unseen), fallback_ids(tok, unseen));
  EXPECT_EQ(tok.decode(tok.encode(unseen)), unseen);

  const std::string mixed =
      "Hello 世界 \xF0\x9F\xA6\x9C!\nnew line\tand tab \xE9\xBE\x98\xE9\xBE\x98";
  const auto ids = tok.encode(mixed);
  EXPECT_EQ(tok.decode(ids), mixed);
  EXPECT_NE(std::find(ids.begin(), ids.end(), 3 + 0xF0), ids.end());  // the emoji's first byte
  EXPECT_NE(std::find(ids.begin(), ids.end(), 3 + '\n'), ids.end());

  // The names of byte tokens as text are ordinary characters; <s> and </s> are added tokens.
  const auto lookalike = tok.encode("<0x0A> <0x41>");
  EXPECT_EQ(tok.decode(lookalike), "<0x0A> <0x41>");
  for (int32_t id : lookalike) EXPECT_GT(id, 258);
  const auto bos_eos = tok.encode("x<s>y</s>");
  EXPECT_EQ(std::count(bos_eos.begin(), bos_eos.end(), 1), 1);
  EXPECT_EQ(std::count(bos_eos.begin(), bos_eos.end(), 2), 1);
  EXPECT_EQ(bos_eos.back(), 2);
}

TEST(SpTrainer, SmallVocabularyKeepsTheMostFrequentCharacters) {
  const std::string& corpus = io::builtin_training_corpus();
  const json j = json::parse(train(corpus, 300));
  EXPECT_EQ(j["model"]["vocab"].size(), 300u);
  EXPECT_EQ(j["model"]["merges"].size(), 0u);  // the characters fill it
  std::map<std::string, int64_t> count;
  for (const auto& c : chars_of(corpus)) ++count[c == " " ? kSp : c];
  int64_t lowest_kept = INT64_MAX, highest_left = 0;
  for (const auto& [c, n] : count) {
    if (is_control(c)) continue;
    if (j["model"]["vocab"].contains(c))
      lowest_kept = std::min(lowest_kept, n);
    else
      highest_left = std::max(highest_left, n);
  }
  EXPECT_GE(lowest_kept, highest_left);
  EXPECT_GT(highest_left, 0);
  const io::Tokenizer tok = io::Tokenizer::from_json(j.dump(), "small");
  const auto ids = tok.encode(corpus);
  EXPECT_EQ(tok.decode(ids), expected_round_trip(corpus, "legacy"));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 0), 0);
  for (const auto& line : lines_of(corpus))
    EXPECT_EQ(tok.decode(tok.encode(line)), expected_round_trip(line, "legacy"));
}

TEST(SpTrainer, HandCheckedMerges) {
  // "▁abababab": (a b) x4; then (ab ab) x2 + ...; ties go to the smaller id pair, so "▁" (rarer
  // than a and b, a later id) joins abab before abab abab does.
  const json j = json::parse(train("abababab", 266));
  EXPECT_EQ(j["model"]["merges"], json::array({"a b", "ab ab", "▁ abab", "▁abab abab"}));
  EXPECT_EQ(j["model"]["vocab"]["a"], 259);  // a and b: 4 each, ties by code point
  EXPECT_EQ(j["model"]["vocab"]["b"], 260);
  EXPECT_EQ(j["model"]["vocab"][kSp], 261);
  EXPECT_EQ(j["model"]["vocab"][kSp + "abababab"], 265);
  // Training stops when no pair is left.
  EXPECT_EQ(json::parse(train("abababab", 400))["model"]["vocab"].size(), 266u);
  // "▁" is kept even when the room is one character and "a" is more frequent.
  const json one = json::parse(train("aaaa", 260));
  EXPECT_EQ(one["model"]["vocab"].size(), 260u);
  EXPECT_EQ(one["model"]["vocab"][kSp], 259);
  const io::Tokenizer t1 = io::Tokenizer::from_json(one.dump(), "one");
  EXPECT_EQ(t1.decode(t1.encode("aaaa bb")), "aaaa bb");
  // Runs of spaces become pieces of their own and lead words; no piece ends a word with "▁".
  const json ws = json::parse(train("x    y    z    w", 280));
  EXPECT_TRUE(ws["model"]["vocab"].contains(kSp + kSp + kSp + kSp));
  EXPECT_TRUE(ws["model"]["vocab"].contains(kSp + kSp + kSp + kSp + "y"));
  for (const auto& [p, id] : ws["model"]["vocab"].items()) EXPECT_TRUE(spaces_only_lead(p)) << p;
  // Merges never rebuild a fixed or special token's string.
  const json fixed =
      json::parse(train("<s> <s> <s> <0x41> <0x41> <image> <image>", 400, "legacy", {"<image>"}));
  for (const auto& [p, id] : fixed["model"]["vocab"].items())
    EXPECT_TRUE(id.get<int>() < 259 || (p != "<s>" && p != "<0x41>" && p != "<image>")) << p;
  const io::Tokenizer tf = io::Tokenizer::from_json(fixed.dump(), "fixed");
  EXPECT_EQ(tf.decode(tf.encode("<0x41><0x41>")), "<0x41><0x41>");
  EXPECT_EQ(tf.encode("<image>"), (std::vector<int32_t>{400}));
}

TEST(SpTrainer, SpecialTokensAtTheirIds) {
  const io::Tokenizer tok = io::Tokenizer::from_json(
      train(io::builtin_training_corpus(), 1000, "legacy", {"<image>", "<pad>"}, 32000), "gap");
  EXPECT_EQ(tok.vocab_size(), 32002);
  EXPECT_EQ(tok.piece_to_id("<image>"), 32000);
  EXPECT_EQ(tok.piece_to_id("<pad>"), 32001);
  EXPECT_THROW(tok.decode({5000}), InvalidArgument);  // inside the gap
  const auto ids = tok.encode("<image>\nWhat is shown?</s>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 32000);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(tok.decode(std::vector<int32_t>(ids.begin() + 1, ids.end() - 1)), "\nWhat is shown?");
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "\nWhat is shown?");
  EXPECT_EQ(tok.encode("<pad><pad><image>"), (std::vector<int32_t>{32001, 32001, 32000}));
}

TEST(SpTrainer, StylesDifferOnlyInTheNormalizerAndPreTokenizer) {
  const std::string& corpus = io::builtin_training_corpus();
  const json legacy = json::parse(train(corpus, 1000));
  const json meta = json::parse(train(corpus, 1000, "metaspace"));
  EXPECT_TRUE(meta["normalizer"].is_null());
  EXPECT_EQ(meta["pre_tokenizer"], json::parse(R"({"type": "Metaspace", "replacement": "▁",
      "prepend_scheme": "first", "split": false})"));
  EXPECT_EQ(meta["decoder"], legacy["decoder"]);
  EXPECT_EQ(meta["post_processor"], legacy["post_processor"]);
  EXPECT_EQ(meta["model"], legacy["model"]);  // the corpus does not start with a space
  // Legacy prepends "▁" to every section between added tokens, Metaspace "first" only once.
  const io::Tokenizer tl = io::Tokenizer::from_json(legacy.dump(), "legacy");
  const io::Tokenizer tm = io::Tokenizer::from_json(meta.dump(), "metaspace");
  const auto il = tl.encode("a</s>b"), im = tm.encode("a</s>b");
  const auto after_eos = [](const io::Tokenizer& t, const std::vector<int32_t>& ids) {
    const auto it = std::find(ids.begin(), ids.end(), 2);
    return it != ids.end() && it + 1 != ids.end() ? t.id_to_piece(*(it + 1)) : std::string();
  };
  EXPECT_TRUE(after_eos(tl, il).starts_with(kSp)) << after_eos(tl, il);
  EXPECT_EQ(after_eos(tm, im), "b");
  EXPECT_EQ(tl.decode(il), "a</s> b");
  EXPECT_EQ(tm.decode(im), "a</s>b");
}

TEST(SpTrainer, Deterministic) {
  const std::string& corpus = io::builtin_training_corpus();
  EXPECT_EQ(train(corpus, 1500, "legacy", {"<image>"}), train(corpus, 1500, "legacy", {"<image>"}));
  EXPECT_EQ(train(corpus, 1500, "metaspace"), train(corpus, 1500, "metaspace"));
  EXPECT_NE(train(corpus, 1500), train(corpus + " zzz zzz zzz", 1500));
  EXPECT_NE(train(corpus, 1500), train(corpus, 1501));
}

TEST(SpTrainer, RejectsBadOptions) {
  try {
    train("abc", 259);
    ADD_FAILURE() << "vocab_size 259 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size 259 is below 260"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(train("abc", 0), InvalidArgument);
  EXPECT_THROW(train("abc", -5), InvalidArgument);
  EXPECT_NO_THROW(train("abc", 260));
  EXPECT_THROW(train("abc", 300, "Legacy"), InvalidArgument);
  EXPECT_THROW(train("abc", 300, ""), InvalidArgument);
  EXPECT_THROW(train("abc", 300, "legacy", {"<a>", "<a>"}), InvalidArgument);
  EXPECT_THROW(train("abc", 300, "legacy", {""}), InvalidArgument);
  EXPECT_THROW(train("abc", 300, "legacy", {"<s>"}), InvalidArgument);     // id 1 already
  EXPECT_THROW(train("abc", 300, "legacy", {"<0x0A>"}), InvalidArgument);  // id 13 already
  EXPECT_THROW(train("abc", 300, "legacy", {"\xFF"}), InvalidArgument);
  EXPECT_THROW(train("abc", 300, "legacy", {"<image>"}, 299), InvalidArgument);
  EXPECT_NO_THROW(train("abc", 300, "legacy", {"<image>"}, 300));
}

TEST(SpTrainer, EmptyAndOddCorpora) {
  for (const std::string& corpus : {std::string(), std::string("\n\n\t"), std::string("\xFF\xFE"),
                                    std::string(" "), std::string(3000, 'a')}) {
    const std::string text = train(corpus, 300);
    const io::Tokenizer tok = io::Tokenizer::from_json(text, "odd");
    EXPECT_TRUE(tok.piece_to_id(kSp).has_value());
    for (const std::string probe : {"hello world", "  x", "\xE4\xB8\x96\xE7\x95\x8C"})
      EXPECT_EQ(tok.decode(tok.encode(probe)), probe);
  }
}

TEST(SpTrainer, TinyTokenizerOffersSentencePieceAndFillsGaps) {
  using models::tiny::TokenizerOptions;
  models::tiny::Tokenizer tok =
      models::tiny::make_tokenizer({.vocab_size = 1000,
                                    .specials = {"<image>", "<pad>"},
                                    .special_first_id = 32000,
                                    .style = TokenizerOptions::Style::kSentencePiece});
  EXPECT_EQ(tok.text,
            train(io::builtin_training_corpus(), 1000, "legacy", {"<image>", "<pad>"}, 32000));
  EXPECT_EQ(tok.facts.size, 32002);
  EXPECT_EQ(tok.facts.added_ids.at("<image>"), 32000);
  EXPECT_EQ(tok.facts.added_ids.at("<s>"), 1);
  const io::Tokenizer before = io::Tokenizer::from_json(tok.text, "before");
  models::tiny::fill_unassigned_ids(tok, 32064);
  EXPECT_EQ(tok.facts.size, 32064);
  const io::Tokenizer after = io::Tokenizer::from_json(tok.text, "after");
  EXPECT_EQ(after.vocab_size(), 32064);
  EXPECT_EQ(after.id_to_piece(5000), kSp + "x5000");
  EXPECT_EQ(after.id_to_piece(32063), kSp + "x32063");
  EXPECT_EQ(after.decode({5000}), "x5000");
  EXPECT_EQ(after.decode({5000, 32002}), "x5000 x32002");
  EXPECT_EQ(after.piece_to_id("<image>"), 32000);
  // Text never reaches the fillers: encoding is unchanged.
  for (const std::string& text : {std::string("x5000 ") + kSp + "x5000", std::string("x1000x999"),
                                  io::builtin_training_corpus()}) {
    const auto ids = after.encode(text);
    EXPECT_EQ(ids, before.encode(text));
    EXPECT_TRUE(std::all_of(ids.begin(), ids.end(), [](int32_t id) { return id < 1000; }));
  }

  // The default stays the byte-level trainer, and its fillers stay "Ġx<id>".
  models::tiny::Tokenizer bl = models::tiny::make_tokenizer(
      {.vocab_size = 500, .specials = test::qwen2_specials(), .special_first_id = 151643});
  io::BpeTrainOptions bo;
  bo.vocab_size = 500;
  bo.special_tokens = test::qwen2_specials();
  bo.special_first_id = 151643;
  EXPECT_EQ(bl.text, io::train_byte_level_bpe(io::builtin_training_corpus(), bo));
  models::tiny::fill_unassigned_ids(bl, 151680);
  const io::Tokenizer blt = io::Tokenizer::from_json(bl.text, "byte-level");
  EXPECT_EQ(blt.id_to_piece(600), "\xC4\xA0x600");
  EXPECT_EQ(blt.decode({600}), " x600");
}
