// Unit tests on a tiny hand-made tokenizer.json: BPE merge order (both merge encodings), added
// tokens and their flags, decode with U+FFFD, the streaming detokenizer, and load errors.
// Expected ids are worked out by hand from the merge list below.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "core/error.h"
#include "io/tokenizer.h"
#include "io/unicode.h"
#include "tokenizer_test_util.h"

using namespace mmrt;
using nlohmann::json;

namespace {

// GPT-2 bytes_to_unicode, written out again here (independently of src/io/unicode.cpp).
std::string byte_char(int b) {
  int cp = b;
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
    int n = 0;
    for (int k = 0; k < b; ++k)
      if (!((k >= 33 && k <= 126) || (k >= 161 && k <= 172) || k >= 174)) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// Byte b has id b. Merges (rank: result = id):
//   0 h e = 256, 1 l l = 257, 2 he ll = 258, 3 hell o = 259, 4 Ġ w = 260, 5 Ġw o = 261,
//   6 r l = 262, 7 Ġwo rl = 263, 8 Ġworl d = 264, 9 b c = 265, 10 a b = 266, 11 x x = 267.
// Added: <|im_start|> 300 (special), <think> 301, <a> 302, <a>b 303, <mask> 304 (lstrip+rstrip),
// é 305 (normalized=true). Ids 268..299 are unused.
json tiny_json(bool pair_merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const std::string G = byte_char(' ');
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"},       {"he", "ll"},      {"hell", "o"}, {G, "w"},   {G + "w", "o"},
      {"r", "l"}, {G + "wo", "rl"}, {G + "worl", "d"}, {"b", "c"},    {"a", "b"}, {"x", "x"}};
  json m = json::array();
  int id = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    m.push_back(pair_merges ? json::array({a, b}) : json(a + " " + b));
  }
  auto added = [](int id, const std::string& c, bool special, bool strip, bool normalized) {
    return json{{"id", id},          {"content", c},    {"single_word", false},
                {"lstrip", strip},   {"rstrip", strip}, {"normalized", normalized},
                {"special", special}};
  };
  json j;
  j["version"] = "1.0";
  j["added_tokens"] = json::array(
      {added(300, "<|im_start|>", true, false, false), added(301, "<think>", false, false, false),
       added(302, "<a>", false, false, false), added(303, "<a>b", false, false, false),
       added(304, "<mask>", true, true, false), added(305, "\xC3\xA9", false, false, true)});
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"},
                     {"pattern", {{"Regex", std::string(io::unicode::kQwen2SplitPattern)}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}};
  return j;
}

io::Tokenizer tiny(bool pair_merges = false) {
  return io::Tokenizer::from_json(tiny_json(pair_merges).dump(), "tiny.json");
}

using Ids = std::vector<int32_t>;
const std::string kFFFD = "\xEF\xBF\xBD";

}  // namespace

TEST(Tokenizer, MergeRanksInBothEncodings) {
  for (bool pairs : {false, true}) {
    SCOPED_TRACE(pairs ? "[\"a\",\"b\"] merges" : "\"a b\" merges");
    const io::Tokenizer tok = tiny(pairs);
    EXPECT_EQ(tok.encode("hello world"), (Ids{259, 264}));
    EXPECT_EQ(tok.encode("abc"), (Ids{'a', 265}));  // rank 9 (b c) beats rank 10 (a b)
    EXPECT_EQ(tok.encode("abd"), (Ids{266, 'd'}));
    EXPECT_EQ(tok.encode("xxx"), (Ids{267, 'x'}));  // equal ranks: leftmost first
    EXPECT_EQ(tok.encode("xxxx"), (Ids{267, 267}));
    EXPECT_EQ(tok.encode("hello"), (Ids{259}));
    EXPECT_EQ(tok.encode(""), Ids{});
    // Long pieces take the heap-based merge loop: same answers.
    std::string ab, x;
    for (int i = 0; i < 200; ++i) ab += "ab";
    for (int i = 0; i < 301; ++i) x += "x";
    EXPECT_EQ(tok.encode(ab), Ids(200, 266));
    Ids want_x(150, 267);
    want_x.push_back('x');
    EXPECT_EQ(tok.encode(x), want_x);
    // "a" + "ab"*150 + "c": (b c) has the lowest rank and goes first, then every (a b).
    Ids want_abc{'a'};
    want_abc.insert(want_abc.end(), 149, 266);
    want_abc.push_back('a');
    want_abc.push_back(265);
    EXPECT_EQ(tok.encode("a" + ab.substr(0, 300) + "c"), want_abc);
  }
}

TEST(Tokenizer, AddedTokensAndFlags) {
  const io::Tokenizer tok = tiny();
  EXPECT_EQ(tok.encode("<|im_start|>hello<think>"), (Ids{300, 259, 301}));
  EXPECT_EQ(tok.encode("<a>b"), (Ids{303}));  // longest match
  EXPECT_EQ(tok.encode("<a>c"), (Ids{302, 'c'}));
  EXPECT_EQ(tok.encode("<|im_start"), (Ids{'<', '|', 'i', 'm', '_', 's', 't', 'a', 'r', 't'}));
  // lstrip/rstrip swallow the white space around <mask>.
  EXPECT_EQ(tok.encode("x \t<mask>  x"), (Ids{'x', 304, 'x'}));
  EXPECT_EQ(tok.encode("x <mask>"), (Ids{'x', 304}));
  // normalized=true: matched after NFC, so the decomposed form matches too.
  EXPECT_EQ(tok.encode("\xC3\xA9"), (Ids{305}));
  EXPECT_EQ(tok.encode("e\xCC\x81"), (Ids{305}));
  // normalized=false tokens are split out before NFC: '>' + U+0338 stays apart (NFC alone
  // would compose them into U+226F).
  EXPECT_EQ(tok.encode("<|im_start|>\xCC\xB8"), (Ids{300, 0xCC, 0xB8}));
  EXPECT_EQ(tok.encode("a\xCC\xB8"), (Ids{'a', 0xCC, 0xB8}));
  EXPECT_EQ(tok.encode(">\xCC\xB8"), (Ids{0xE2, 0x89, 0xAF}));  // U+226F after NFC
  // Invalid UTF-8 input is read as U+FFFD first.
  EXPECT_EQ(tok.encode("a\xFF"), tok.encode("a" + kFFFD));
}

TEST(Tokenizer, DecodeAndLookups) {
  const io::Tokenizer tok = tiny();
  EXPECT_EQ(tok.vocab_size(), 306);
  EXPECT_EQ(tok.decode({259, 264}), "hello world");
  EXPECT_EQ(tok.decode({300, 259, 301}), "<|im_start|>hello<think>");
  EXPECT_EQ(tok.decode({300, 259, 301}, /*skip_special=*/true), "hello<think>");
  EXPECT_EQ(tok.decode({0xE4, 0xB8}), kFFFD);
  EXPECT_EQ(tok.decode({0xE4, 'a'}), kFFFD + "a");
  EXPECT_EQ(tok.decode({0xED, 0xA0, 0x80}), kFFFD + kFFFD + kFFFD);
  EXPECT_EQ(tok.decode({0xE4, 300}), kFFFD + "<|im_start|>");
  EXPECT_THROW(tok.decode({306}), InvalidArgument);
  EXPECT_THROW(tok.decode({-1}), InvalidArgument);
  EXPECT_THROW(tok.decode({280}), InvalidArgument);  // a gap in the id space
  EXPECT_EQ(tok.token_bytes(260), " w");
  EXPECT_EQ(tok.id_to_piece(260), byte_char(' ') + "w");
  EXPECT_EQ(tok.token_bytes(304), "<mask>");
  EXPECT_EQ(tok.piece_to_id(byte_char(' ') + "world"), 264);
  EXPECT_EQ(tok.piece_to_id("<think>"), 301);
  EXPECT_EQ(tok.piece_to_id(" world"), std::nullopt);
  EXPECT_TRUE(tok.is_special(300));
  EXPECT_FALSE(tok.is_special(301));
  EXPECT_FALSE(tok.is_special(99999));
}

TEST(Tokenizer, StreamingNeverSplitsACharacter) {
  const io::Tokenizer tok = tiny();
  io::StreamingDetokenizer cjk(tok, false);
  EXPECT_EQ(cjk.push(0xE4), "");  // 中 = E4 B8 AD
  EXPECT_EQ(cjk.push(0xB8), "");
  EXPECT_EQ(cjk.push(0xAD), "\xE4\xB8\xAD");
  // 👍🏽 = F0 9F 91 8D + F0 9F 8F BD: output only when each code point completes.
  const std::string thumbs = "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD";
  std::string seen;
  for (size_t i = 0; i < thumbs.size(); ++i) {
    const std::string out = cjk.push(static_cast<unsigned char>(thumbs[i]));
    EXPECT_EQ(out.empty(), i != 3 && i != 7) << "byte " << i;
    seen += out;
  }
  EXPECT_EQ(seen, thumbs);
  EXPECT_EQ(cjk.flush(), "");
  // An unfinished sequence before a special token becomes U+FFFD; a dangling tail at flush too.
  io::StreamingDetokenizer s(tok, false);
  EXPECT_EQ(s.push('a'), "a");
  EXPECT_EQ(s.push(0xE4), "");
  EXPECT_EQ(s.push(300), kFFFD + "<|im_start|>");
  EXPECT_EQ(s.push(0xF0), "");
  EXPECT_EQ(s.push(0x9F), "");
  EXPECT_EQ(s.flush(), kFFFD);
  io::StreamingDetokenizer skip(tok, true);
  EXPECT_EQ(skip.push(300), "");
  EXPECT_EQ(skip.push(259), "hello");
  EXPECT_THROW(skip.push(280), InvalidArgument);
}

TEST(Tokenizer, StreamingMatchesDecodeOnRandomIds) {
  const io::Tokenizer tok = tiny();
  std::mt19937 rng(7);
  // Mostly bytes that form (or break) multi-byte sequences, some merges and added tokens.
  const std::vector<int32_t> pool = {0xE4, 0xB8, 0xAD, 0xF0, 0x9F, 0x91, 0x8D, 0xC3, 0xA9, 0x80,
                                     0xBF, 0xFF, 'a',  ' ',  259,  264,  300,  301,  304};
  for (int trial = 0; trial < 2000; ++trial) {
    const bool skip = trial % 2;
    Ids ids(rng() % 24);
    for (auto& id : ids) id = pool[rng() % pool.size()];
    const std::string want = tok.decode(ids, skip);
    io::StreamingDetokenizer s(tok, skip);
    std::string got;
    for (int32_t id : ids) {
      const std::string piece = s.push(id);
      ASSERT_TRUE(io::unicode::is_valid_utf8(piece));
      got += piece;
      ASSERT_EQ(want.compare(0, got.size(), got), 0) << "emitted text is not a prefix of decode()";
    }
    got += s.flush();
    ASSERT_EQ(got, want) << "trial " << trial << " ids " << test::ids_str(ids);
  }
}

namespace {

// Loads a modified tiny tokenizer.json; returns the FormatError message ("" if none thrown).
std::string load_error(const std::function<void(json&)>& edit) {
  json j = tiny_json(false);
  edit(j);
  try {
    io::Tokenizer::from_json(j.dump(), "broken/tokenizer.json");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Tokenizer, MalformedFilesNameTheFileAndTheProblem) {
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find("broken/tokenizer.json") != std::string::npos &&
           msg.find(part) != std::string::npos;
  };
  EXPECT_PRED2(has, load_error([](json& j) { j.erase("model"); }), "missing 'model'");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["type"] = "WordPiece"; }),
               "unknown model type 'WordPiece'");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["merges"][3] = "hello"; }),
               "model.merges[3]");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["merges"][3] = "a b c"; }),
               "two tokens separated by one space");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["merges"][0] = json::array({"h"}); }),
               "model.merges[0]");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["merges"][1] = "q zz"; }),
               "'zz' is not in the vocabulary");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["merges"][1] = "q z"; }),
               "the merged token 'qz' is not in the vocabulary");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"].erase("merges"); }), "model.merges");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["vocab"] = json::array(); }),
               "model.vocab");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["vocab"]["q"] = "seven"; }),
               "model.vocab[\"q\"]");
  EXPECT_PRED2(has, load_error([](json& j) { j["model"]["vocab"].erase(byte_char(0)); }),
               "no token for byte 0x00");
  EXPECT_PRED2(has, load_error([](json& j) {
                 j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a";
               }),
               "does not compile");
  EXPECT_PRED2(has, load_error([](json& j) {
                 j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
               }),
               "behavior 'Removed'");
  EXPECT_PRED2(has, load_error([](json& j) {
                 j["normalizer"] = {{"type", "NFKC"}};
               }),
               "normalizer type 'NFKC'");
  EXPECT_PRED2(has, load_error([](json& j) { j["added_tokens"][0].erase("content"); }),
               "added_tokens[0]");
  EXPECT_PRED2(has, load_error([](json& j) { j = json::array(); }), "not a JSON object");
  try {
    io::Tokenizer::from_json("{\"model\": ", "broken/tokenizer.json");
    ADD_FAILURE() << "no error for truncated JSON";
  } catch (const FormatError& e) {
    EXPECT_PRED2(has, std::string(e.what()), "not valid JSON");
  }
  EXPECT_THROW(io::Tokenizer::from_file("/nonexistent/dir/tokenizer.json"), NotFound);
  EXPECT_EQ(load_error([](json&) {}), "");  // the unmodified file loads
}

// ---- SentencePiece-style BPE -------------------------------------------------------------------

namespace {

// <unk> 0, <s> 1 (special), <0x00>..<0xFF> 2..257, then "▁" 258, "a" 259, "b" 260, and merges
// (rank: result = id) 0 ▁ a = 261, 1 a b = 262, 2 ▁a b = 263. Llama-2's normalizer and decoder.
json sp_json() {
  const std::string U = "\u2581";
  json vocab = {{"<unk>", 0}, {"<s>", 1}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 2 + b;
  }
  vocab[U] = 258;
  vocab["a"] = 259;
  vocab["b"] = 260;
  vocab[U + "a"] = 261;
  vocab["ab"] = 262;
  vocab[U + "ab"] = 263;
  json j;
  j["added_tokens"] = json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                   {{"id", 1}, {"content", "<s>"}, {"special", true}}});
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
  j["model"] = {{"type", "BPE"},    {"unk_token", "<unk>"},
                {"fuse_unk", true}, {"byte_fallback", true},
                {"vocab", vocab},   {"merges", {U + " a", "a b", U + "a b"}}};
  return j;
}

std::string sp_load_error(const std::function<void(json&)>& edit) {
  json j = sp_json();
  edit(j);
  try {
    io::Tokenizer::from_json(j.dump(), "sp/tokenizer.json");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(TokenizerSentencePiece, MergesBytesFallbackAndDecoding) {
  const io::Tokenizer tok = io::Tokenizer::from_json(sp_json().dump(), "sp");
  // "ab a": "▁ab▁a": ▁ a b ▁ a -> (rank 0, leftmost) ▁a b ▁ a -> ▁a b ▁a -> (rank 2) ▁ab ▁a.
  EXPECT_EQ(tok.encode("ab a"), (std::vector<int32_t>{263, 261}));
  // "é" is not in the vocabulary: its UTF-8 bytes C3 A9; "b" keeps its own token.
  EXPECT_EQ(tok.encode("éb"), (std::vector<int32_t>{258, 2 + 0xC3, 2 + 0xA9, 260}));
  // Added tokens are split first; each section gets its own ▁ (Llama-2's legacy behaviour).
  EXPECT_EQ(tok.encode("<s>a"), (std::vector<int32_t>{1, 261}));
  EXPECT_EQ(tok.encode(""), std::vector<int32_t>{});
  EXPECT_EQ(tok.leading_spaces_stripped(), 1);
  EXPECT_EQ(tok.token_bytes(261), " a");
  EXPECT_EQ(tok.token_bytes(2 + 0x41), "A");
  EXPECT_EQ(tok.decode({263, 261}), "ab a");  // the prepended space is stripped
  EXPECT_EQ(tok.decode({1, 261}), "<s> a");
  EXPECT_EQ(tok.decode({1, 261}, true), "a");
  EXPECT_EQ(tok.decode({2 + 0xC3}), "\xEF\xBF\xBD");  // half a character: U+FFFD
  io::StreamingDetokenizer s(tok);
  std::string got = s.push(258);
  got += s.push(2 + 0xC3);
  EXPECT_EQ(got, "");  // the space is the stripped one, the byte waits for its partner
  for (int32_t id : {2 + 0xA9, 261}) got += s.push(id);
  got += s.flush();
  EXPECT_EQ(got, "é a");

  // Without byte fallback, unknown characters become <unk>, consecutive ones fused.
  json j = sp_json();
  j["model"]["byte_fallback"] = false;
  const io::Tokenizer unk = io::Tokenizer::from_json(j.dump(), "sp");
  EXPECT_EQ(unk.encode("ééa"), (std::vector<int32_t>{258, 0, 259}));
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(io::Tokenizer::from_json(j.dump(), "sp").encode("ééa"),
            (std::vector<int32_t>{258, 0, 0, 259}));

  // Metaspace (split into words, prepended to the first section only).
  j = sp_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", "\u2581"},
                        {"prepend_scheme", "first"},
                        {"split", true}};
  const io::Tokenizer ms = io::Tokenizer::from_json(j.dump(), "sp");
  EXPECT_EQ(ms.encode("ab ab"), (std::vector<int32_t>{263, 263}));
  EXPECT_EQ(ms.encode("<s>ab"), (std::vector<int32_t>{1, 262}));  // not the first section
}

TEST(TokenizerSentencePiece, LoadErrorsNameTheField) {
  auto has = [](const std::string& m, const std::string& part) {
    return m.find(part) != std::string::npos;
  };
  EXPECT_PRED2(has, sp_load_error([](json& j) { j.erase("decoder"); }), "needs a Sequence decoder");
  EXPECT_PRED2(has, sp_load_error([](json& j) {
                 j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}};
               }),
               "literal");
  EXPECT_PRED2(has, sp_load_error([](json& j) { j["model"]["vocab"].erase("<0x41>"); }),
               "no <0x41>");
  EXPECT_PRED2(has, sp_load_error([](json& j) { j["model"]["unk_token"] = "<?>"; }),
               "model.unk_token '<?>' is not in the vocabulary");
  EXPECT_PRED2(has, sp_load_error([](json& j) { j["decoder"]["decoders"][3]["stop"] = 1; }),
               "Strip is supported for leading spaces only");
  EXPECT_PRED2(has, sp_load_error([](json& j) {
                 j["pre_tokenizer"] = {{"type", "Metaspace"}, {"prepend_scheme", "sometimes"}};
               }),
               "prepend_scheme");
  EXPECT_PRED2(has, sp_load_error([](json& j) {
                 j["pre_tokenizer"] = {{"type", "Whitespace"}};
               }),
               "pre-tokenizer type 'Whitespace'");
}
