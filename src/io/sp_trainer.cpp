// SentencePiece-style BPE training (characters, byte fallback) and the tokenizer.json writer in
// the layout of Hugging Face's LlamaTokenizerFast files (Llama-2, Mistral, LLaVA).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "io/bpe_merge.h"
#include "io/bpe_trainer.h"
#include "io/unicode.h"

namespace mmrt::io {

namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space
constexpr int32_t kFixedTokens = 3 + 256;       // <unk>, <s>, </s>, <0x00>..<0xFF>
constexpr size_t kMaxPieceChars = 16;           // SentencePiece's max_piece_length default

std::string byte_token(int b) {
  char name[8];
  std::snprintf(name, sizeof(name), "<0x%02X>", b);
  return name;
}

// The strings of ids 0..258.
std::vector<std::string> fixed_tokens() {
  std::vector<std::string> t = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) t.push_back(byte_token(b));
  return t;
}

void check_options(const SentencePieceTrainOptions& opts, const std::vector<std::string>& fixed) {
  const std::string who = "SentencePiece BPE trainer: ";
  if (opts.style != "legacy" && opts.style != "metaspace")
    throw InvalidArgument(who + "style '" + opts.style +
                          "' is not supported (legacy or metaspace)");
  if (opts.vocab_size < kFixedTokens + 1)
    throw InvalidArgument(who + "vocab_size " + std::to_string(opts.vocab_size) +
                          " is below 260: <unk>, <s>, </s>, the 256 <0xNN> byte tokens and \"" +
                          kSpace + "\" need that many");
  if (opts.special_first_id != -1 && opts.special_first_id < opts.vocab_size)
    throw InvalidArgument(who + "special_first_id " + std::to_string(opts.special_first_id) +
                          " must be -1 or >= vocab_size " + std::to_string(opts.vocab_size));
  const int64_t first = opts.special_first_id >= 0 ? opts.special_first_id : opts.vocab_size;
  if (first + static_cast<int64_t>(opts.special_tokens.size()) > INT32_MAX)
    throw InvalidArgument(who + "special token ids overflow int32");
  std::unordered_set<std::string> seen;
  for (const auto& s : opts.special_tokens) {
    if (s.empty()) throw InvalidArgument(who + "empty special token");
    if (!unicode::is_valid_utf8(s)) throw InvalidArgument(who + "special token is not valid UTF-8");
    if (auto it = std::find(fixed.begin(), fixed.end(), s); it != fixed.end())
      throw InvalidArgument(who + "special token " + s + " is already token " +
                            std::to_string(it - fixed.begin()) + " of the fixed layout");
    if (!seen.insert(s).second) throw InvalidArgument(who + "duplicate special token " + s);
  }
}

bool is_control(uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F);  // Unicode general category Cc
}

// The text the tokenizer's BPE will see: spaces as U+2581 and one prepended (the legacy
// normaliser prepends always; Metaspace "first" unless the text already starts with one).
std::string sp_normalize(const std::string& corpus, const std::string& style) {
  const std::string text = unicode::sanitize_utf8(corpus);
  if (text.empty()) return text;
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) out += c == ' ' ? std::string(kSpace) : std::string(1, c);
  if (style == "legacy" || !out.starts_with(kSpace)) out.insert(0, kSpace);
  return out;
}

// The characters of `text` (valid UTF-8) in order.
std::vector<std::string> characters(const std::string& text) {
  std::vector<std::string> chars;
  for (size_t i = 0; i < text.size();) {
    const auto st = unicode::utf8_next(std::string_view(text).substr(i));
    const size_t len = st.len > 0 ? st.len : 1;
    chars.push_back(text.substr(i, len));
    i += len;
  }
  return chars;
}

uint32_t codepoint(const std::string& ch) {
  return unicode::utf8_next(ch).cp;
}

// The vocabulary's characters: those of `chars` but the controls, by count (ties by code point),
// as many as `room` holds; "▁" always among them (in the last slot if it would not fit).
std::vector<std::string> pick_characters(const std::vector<std::string>& chars, int32_t room) {
  std::unordered_map<std::string, int64_t> count;
  count[kSpace] += 0;
  for (const auto& c : chars)
    if (!is_control(codepoint(c))) ++count[c];
  std::vector<std::pair<std::string, int64_t>> sorted(count.begin(), count.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) {
    return x.second != y.second ? x.second > y.second : x.first < y.first;
  });
  std::vector<std::string> picked;
  for (const auto& [c, n] : sorted) {
    if (int32_t(picked.size()) == room) break;
    picked.push_back(c);
  }
  if (std::find(picked.begin(), picked.end(), kSpace) == picked.end()) picked.back() = kSpace;
  return picked;
}

ojson replace_step(const std::string& from, const std::string& to) {
  ojson r;
  r["type"] = "Replace";
  r["pattern"] = {{"String", from}};
  r["content"] = to;
  return r;
}

ojson added_token(int32_t id, const std::string& content) {
  ojson t;
  t["id"] = id;
  t["content"] = content;
  t["single_word"] = false;
  t["lstrip"] = false;
  t["rstrip"] = false;
  t["normalized"] = false;
  t["special"] = true;
  return t;
}

// TemplateProcessing that puts `token` before each sequence: <s> (id 1) in Llama-2 / Mistral
// files, |ENDOFTEXT| in Fuyu's.
ojson prefix_post_processor(const std::string& token, int32_t id) {
  const auto special = [&token](int type_id) {
    return ojson{{"SpecialToken", {{"id", token}, {"type_id", type_id}}}};
  };
  const auto sequence = [](const char* id, int type_id) {
    return ojson{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
  };
  ojson p;
  p["type"] = "TemplateProcessing";
  p["single"] = {special(0), sequence("A", 0)};
  p["pair"] = {special(0), sequence("A", 0), special(1), sequence("B", 1)};
  ojson bos;
  bos["id"] = token;
  bos["ids"] = {id};
  bos["tokens"] = {token};
  p["special_tokens"] = {{token, bos}};
  return p;
}

ojson sp_decoder() {
  ojson strip;
  strip["type"] = "Strip";
  strip["content"] = " ";
  strip["start"] = 1;
  strip["stop"] = 0;
  ojson d;
  d["type"] = "Sequence";
  d["decoders"] = {
      replace_step(kSpace, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}, strip};
  return d;
}

// What SentencePiece-style BPE learned: every piece by id (the fixed ones first, then the
// corpus's characters, then merged pieces), the merges in rank order, and how often each piece
// occurs in the corpus once segmented by those merges.
struct Learned {
  std::vector<std::string> tokens;  // [n_tokens]
  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<int64_t> counts;  // [n_tokens]
};

// Learns up to `vocab_size` pieces in all (the fixed ones included) from `corpus`. No merge
// makes the string of a fixed or `reserved` piece, or one of more than 16 characters.
Learned learn(const std::string& corpus, const std::string& style, std::vector<std::string> fixed,
              int32_t vocab_size, const std::vector<std::string>& reserved_pieces) {
  Learned L;
  L.tokens = std::move(fixed);
  const auto n_fixed = static_cast<int32_t>(L.tokens.size());
  const std::vector<std::string> chars = characters(sp_normalize(corpus, style));
  std::unordered_map<std::string, int32_t> char_id;
  for (const auto& c : pick_characters(chars, vocab_size - n_fixed)) {
    char_id.emplace(c, int32_t(L.tokens.size()));
    L.tokens.push_back(c);
  }

  // Words: a run of "▁" and the characters after it, up to the next run; a character outside the
  // vocabulary (encoded as bytes, which never merge) ends a word too.
  std::map<std::string, int64_t> counts_by_word;  // ordered: deterministic word ids
  std::string word;
  bool prev_space = false;
  const auto flush = [&] {
    if (!word.empty()) ++counts_by_word[word];
    word.clear();
  };
  for (const auto& c : chars) {
    if (!char_id.count(c)) {
      flush();
      prev_space = false;
      continue;
    }
    const bool space = c == kSpace;
    if (space && !prev_space) flush();
    word += c;
    prev_space = space;
  }
  flush();
  std::vector<detail::BpeWord> words;  // [n_words]
  words.reserve(counts_by_word.size());
  std::vector<int64_t> single(L.tokens.size(), 0);  // one-character words, by id
  for (const auto& [w, f] : counts_by_word) {
    detail::BpeWord bw;
    bw.freq = f;
    for (const auto& c : characters(w)) bw.sym.push_back(char_id.at(c));
    if (bw.sym.size() > 1)
      words.push_back(std::move(bw));
    else
      single[size_t(bw.sym[0])] += f;
  }

  std::unordered_set<std::string> reserved(L.tokens.begin(), L.tokens.begin() + n_fixed);
  reserved.insert(reserved_pieces.begin(), reserved_pieces.end());
  const auto allowed = [&reserved](const std::string& piece) {
    size_t n_chars = 0;
    for (unsigned char c : piece) n_chars += (c & 0xC0) != 0x80;
    return n_chars <= kMaxPieceChars && !reserved.count(piece);
  };
  L.merges = detail::learn_bpe_merges(words, L.tokens, vocab_size, allowed);
  L.counts.assign(L.tokens.size(), 0);
  for (size_t id = 0; id < single.size(); ++id) L.counts[id] += single[id];
  for (const auto& w : words)
    for (int32_t id : w.sym) L.counts[size_t(id)] += w.freq;
  return L;
}

ojson legacy_normalizer() {
  ojson prepend;
  prepend["type"] = "Prepend";
  prepend["prepend"] = kSpace;
  return {{"type", "Sequence"}, {"normalizers", {prepend, replace_step(" ", kSpace)}}};
}

ojson metaspace_pre_tokenizer() {
  ojson meta;
  meta["type"] = "Metaspace";
  meta["replacement"] = kSpace;
  meta["prepend_scheme"] = "first";
  meta["split"] = false;
  return meta;
}

}  // namespace

std::string train_sentencepiece_bpe(const std::string& corpus,
                                    const SentencePieceTrainOptions& opts) {
  check_options(opts, fixed_tokens());
  const Learned L = learn(corpus, opts.style, fixed_tokens(), opts.vocab_size, opts.special_tokens);
  const std::vector<std::string>& tokens = L.tokens;
  const auto& merges = L.merges;

  // ---- tokenizer.json in the LlamaTokenizerFast layout ----
  ojson added = ojson::array();
  for (int32_t id = 0; id < 3; ++id) added.push_back(added_token(id, tokens[id]));
  const int32_t first_special =
      opts.special_first_id >= 0 ? opts.special_first_id : opts.vocab_size;
  for (size_t k = 0; k < opts.special_tokens.size(); ++k)
    added.push_back(added_token(first_special + int32_t(k), opts.special_tokens[k]));

  // In id order, appended directly (the pieces are distinct; ordered_json's insert is linear).
  ojson vocab = ojson::object();
  auto& entries = vocab.get_ref<ojson::object_t&>();
  entries.reserve(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) entries.push_back({tokens[id], ojson(int32_t(id))});
  ojson merge_list = ojson::array();
  for (const auto& [a, b] : merges) merge_list.push_back(tokens[a] + " " + tokens[b]);

  ojson model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = "<unk>";
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = true;
  model["byte_fallback"] = true;
  model["ignore_merges"] = false;
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merge_list);

  ojson root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = std::move(added);
  const bool legacy = opts.style == "legacy";
  root["normalizer"] = legacy ? legacy_normalizer() : ojson(nullptr);
  root["pre_tokenizer"] = legacy ? ojson(nullptr) : metaspace_pre_tokenizer();
  root["post_processor"] = prefix_post_processor("<s>", 1);
  root["decoder"] = sp_decoder();
  root["model"] = std::move(model);
  return root.dump(2) + "\n";
}

std::string train_sentencepiece_unigram(const std::string& corpus,
                                        const SentencePieceUnigramOptions& opts) {
  const std::string who = "SentencePiece Unigram trainer: ";
  if (opts.style != "legacy" && opts.style != "metaspace")
    throw InvalidArgument(who + "style '" + opts.style +
                          "' is not supported (legacy or metaspace)");
  // <unk> <s> </s>, the user pieces, the byte pieces: the fixed part, all scored 0.
  std::vector<std::string> fixed = {"<unk>", "<s>", "</s>"};
  std::unordered_set<std::string> seen(fixed.begin(), fixed.end());
  for (const auto& p : opts.user_pieces) {
    if (p.empty() || !unicode::is_valid_utf8(p) || p.find(' ') != std::string::npos)
      throw InvalidArgument(who + "user piece '" + p +
                            "' must be non-empty valid UTF-8 without spaces");
    if (!seen.insert(p).second) throw InvalidArgument(who + "duplicate user piece " + p);
    fixed.push_back(p);
  }
  for (int b = 0; b < 256; ++b) {
    if (seen.count(byte_token(b)))
      throw InvalidArgument(who + "user piece " + byte_token(b) + " is a byte piece already");
    fixed.push_back(byte_token(b));
  }
  const auto n_fixed = static_cast<int32_t>(fixed.size());
  if (opts.vocab_size < n_fixed + 1)
    throw InvalidArgument(who + "vocab_size " + std::to_string(opts.vocab_size) + " is below " +
                          std::to_string(n_fixed + 1) + ": the fixed pieces and \"" + kSpace +
                          "\" need that many");
  for (const auto& t : opts.added_specials)
    if (!seen.count(t))
      throw InvalidArgument(who + "added special '" + t +
                            "' is not <unk>, <s>, </s> or a user piece");
  const auto& sp = opts.added_specials;
  if (!opts.prefix_token.empty() && opts.prefix_token != "<s>" &&
      std::find(sp.begin(), sp.end(), opts.prefix_token) == sp.end())
    throw InvalidArgument(who + "prefix token '" + opts.prefix_token +
                          "' must be <s> or one of the added specials");

  const Learned L = learn(corpus, opts.style, fixed, opts.vocab_size, {});
  // Scores: the log-probability of each learned piece in the corpus segmented by the merges,
  // with half a count added to every piece (a merge's intermediate pieces stay possible but
  // unlikely); the fixed pieces score 0, as SentencePiece's user-defined and control pieces.
  int64_t total = 0;
  for (size_t id = size_t(n_fixed); id < L.tokens.size(); ++id) total += L.counts[id];
  const double denom = double(total) + 0.5 * double(L.tokens.size() - size_t(n_fixed));
  std::vector<std::pair<double, std::string>> learned;
  for (size_t id = size_t(n_fixed); id < L.tokens.size(); ++id)
    learned.emplace_back(std::log((double(L.counts[id]) + 0.5) / denom), L.tokens[id]);
  std::sort(learned.begin(), learned.end(), [](const auto& x, const auto& y) {
    return x.first != y.first ? x.first > y.first : x.second < y.second;
  });

  ojson vocab = ojson::array();
  std::unordered_map<std::string, int32_t> id_of;
  for (const auto& p : fixed) {
    id_of.emplace(p, int32_t(vocab.size()));
    vocab.push_back({p, 0.0});
  }
  for (const auto& [score, p] : learned) vocab.push_back({p, score});
  ojson added = ojson::array();
  added.push_back(added_token(0, "<unk>"));
  for (const auto& t : sp)
    if (t != "<unk>") added.push_back(added_token(id_of.at(t), t));

  ojson model;
  model["type"] = "Unigram";
  model["unk_id"] = 0;
  model["vocab"] = std::move(vocab);
  model["byte_fallback"] = true;
  ojson root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = std::move(added);
  const bool legacy = opts.style == "legacy";
  root["normalizer"] = legacy ? legacy_normalizer() : ojson(nullptr);
  root["pre_tokenizer"] = legacy ? ojson(nullptr) : metaspace_pre_tokenizer();
  root["post_processor"] =
      opts.prefix_token.empty()
          ? ojson(nullptr)
          : prefix_post_processor(opts.prefix_token, id_of.at(opts.prefix_token));
  root["decoder"] = sp_decoder();
  root["model"] = std::move(model);
  return root.dump(2) + "\n";
}

}  // namespace mmrt::io
