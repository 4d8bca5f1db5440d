// SentencePiece-style BPE training (characters, byte fallback) and the tokenizer.json writer in
// the layout of Hugging Face's LlamaTokenizerFast files (Llama-2, Mistral, LLaVA).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
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

// TemplateProcessing that puts <s> (id 1) before each sequence, as in Llama-2 / Mistral files.
ojson bos_post_processor() {
  const auto special = [](int type_id) {
    return ojson{{"SpecialToken", {{"id", "<s>"}, {"type_id", type_id}}}};
  };
  const auto sequence = [](const char* id, int type_id) {
    return ojson{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
  };
  ojson p;
  p["type"] = "TemplateProcessing";
  p["single"] = {special(0), sequence("A", 0)};
  p["pair"] = {special(0), sequence("A", 0), special(1), sequence("B", 1)};
  ojson bos;
  bos["id"] = "<s>";
  bos["ids"] = {1};
  bos["tokens"] = {"<s>"};
  p["special_tokens"] = {{"<s>", bos}};
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

}  // namespace

std::string train_sentencepiece_bpe(const std::string& corpus,
                                    const SentencePieceTrainOptions& opts) {
  std::vector<std::string> tokens = fixed_tokens();  // [n_tokens] the piece of each id
  check_options(opts, tokens);

  const std::vector<std::string> chars = characters(sp_normalize(corpus, opts.style));
  std::unordered_map<std::string, int32_t> char_id;
  for (const auto& c : pick_characters(chars, opts.vocab_size - kFixedTokens)) {
    char_id.emplace(c, int32_t(tokens.size()));
    tokens.push_back(c);
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
  for (const auto& [w, f] : counts_by_word) {
    detail::BpeWord bw;
    bw.freq = f;
    for (const auto& c : characters(w)) bw.sym.push_back(char_id.at(c));
    if (bw.sym.size() > 1) words.push_back(std::move(bw));
  }

  // No merge makes a fixed or special token's string, or a piece longer than SentencePiece's
  // default max_piece_length.
  std::unordered_set<std::string> reserved(tokens.begin(), tokens.begin() + kFixedTokens);
  reserved.insert(opts.special_tokens.begin(), opts.special_tokens.end());
  const auto allowed = [&reserved](const std::string& piece) {
    size_t n_chars = 0;
    for (unsigned char c : piece) n_chars += (c & 0xC0) != 0x80;
    return n_chars <= kMaxPieceChars && !reserved.count(piece);
  };
  const std::vector<std::pair<int32_t, int32_t>> merges =
      detail::learn_bpe_merges(words, tokens, opts.vocab_size, allowed);

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
  if (opts.style == "legacy") {
    ojson prepend;
    prepend["type"] = "Prepend";
    prepend["prepend"] = kSpace;
    root["normalizer"] = {{"type", "Sequence"},
                          {"normalizers", {prepend, replace_step(" ", kSpace)}}};
    root["pre_tokenizer"] = nullptr;
  } else {
    root["normalizer"] = nullptr;
    ojson meta;
    meta["type"] = "Metaspace";
    meta["replacement"] = kSpace;
    meta["prepend_scheme"] = "first";
    meta["split"] = false;
    root["pre_tokenizer"] = std::move(meta);
  }
  root["post_processor"] = bos_post_processor();
  root["decoder"] = sp_decoder();
  root["model"] = std::move(model);
  return root.dump(2) + "\n";
}

}  // namespace mmrt::io
