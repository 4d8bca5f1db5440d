// tokenizer.json parsing and validation: every problem becomes a FormatError that names the
// file and the field.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "io/json_fields.h"
#include "io/tokenizer_internal.h"

namespace mmrt::io {

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const Tokenizer::Impl& impl, const std::string& what) {
  throw FormatError(impl.origin + ": " + what);
}

std::string type_of(const json& j) {
  if (!j.is_object()) return "";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool get_bool(const json& obj, const char* key, bool def) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  return it->is_boolean() ? it->get<bool>() : def;
}

// An optional string option that must be absent, null or empty for us to support the file.
void require_empty_string(const Tokenizer::Impl& impl, const json& obj, const char* key,
                          const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return;
  if (!it->is_string() || !it->get<std::string>().empty())
    fail(impl, where + "." + key + " = " + json_excerpt(*it) + " is not supported");
}

void load_normalizer(const json& root, Tokenizer::Impl& impl) {
  auto it = root.find("normalizer");
  if (it == root.end() || it->is_null()) return;
  auto one = [&](const json& n, const std::string& where) {
    const std::string t = type_of(n);
    if (t == "NFC") {
      impl.nfc = true;
    } else {
      fail(impl, where + ": normalizer type '" + t + "' is not supported (only NFC)");
    }
  };
  if (type_of(*it) == "Sequence") {
    auto ns = it->find("normalizers");
    if (ns == it->end() || !ns->is_array())
      fail(impl, "normalizer: Sequence without 'normalizers'");
    for (size_t i = 0; i < ns->size(); ++i)
      one((*ns)[i], "normalizer.normalizers[" + std::to_string(i) + "]");
  } else {
    one(*it, "normalizer");
  }
}

void load_pre_tokenizer(const json& root, Tokenizer::Impl& impl) {
  auto it = root.find("pre_tokenizer");
  if (it == root.end() || it->is_null())
    fail(impl, "missing 'pre_tokenizer' (a byte-level BPE needs a ByteLevel pre-tokenizer)");
  std::vector<std::pair<const json*, std::string>> steps;
  if (type_of(*it) == "Sequence") {
    auto ps = it->find("pretokenizers");
    if (ps == it->end() || !ps->is_array())
      fail(impl, "pre_tokenizer: Sequence without 'pretokenizers'");
    for (size_t i = 0; i < ps->size(); ++i)
      steps.emplace_back(&(*ps)[i], "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]");
  } else {
    steps.emplace_back(&*it, "pre_tokenizer");
  }
  bool byte_level = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const json& p = *steps[i].first;
    const std::string& where = steps[i].second;
    const std::string t = type_of(p);
    if (t == "Split") {
      if (byte_level) fail(impl, where + ": Split after ByteLevel is not supported");
      auto pat = p.find("pattern");
      if (pat == p.end() || !pat->is_object()) fail(impl, where + ": Split without 'pattern'");
      std::string regex;
      if (auto r = pat->find("Regex"); r != pat->end() && r->is_string()) {
        regex = r->get<std::string>();
      } else if (auto s = pat->find("String"); s != pat->end() && s->is_string()) {
        // A literal string pattern: quote it for PCRE2.
        regex = "\\Q" + s->get<std::string>() + "\\E";
      } else {
        fail(impl, where + ".pattern: expected {\"Regex\": ...} or {\"String\": ...}");
      }
      const std::string behavior = p.value("behavior", std::string("Isolated"));
      if (behavior != "Isolated")
        fail(impl, where + ": Split behavior '" + behavior + "' is not supported (only Isolated)");
      if (get_bool(p, "invert", false)) fail(impl, where + ": Split invert=true is not supported");
      impl.splits.emplace_back(regex, impl.origin);
    } else if (t == "ByteLevel") {
      if (byte_level) fail(impl, where + ": a second ByteLevel pre-tokenizer");
      byte_level = true;
      if (get_bool(p, "add_prefix_space", false))
        fail(impl, where + ": ByteLevel add_prefix_space=true is not supported");
      if (get_bool(p, "use_regex", true))  // the GPT-2 split pattern
        impl.splits.emplace_back(
            R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
            impl.origin);
    } else {
      fail(impl, where + ": pre-tokenizer type '" + t +
                     "' is not supported (expected Split and ByteLevel)");
    }
  }
  if (!byte_level) fail(impl, "pre_tokenizer: no ByteLevel step (not a byte-level BPE tokenizer)");
}

void load_decoder(const json& root, Tokenizer::Impl& impl) {
  auto it = root.find("decoder");
  if (it == root.end() || it->is_null()) return;
  const std::string t = type_of(*it);
  if (t != "ByteLevel") fail(impl, "decoder type '" + t + "' is not supported (only ByteLevel)");
}

// SAX handler: model.vocab and model.merges (hundreds of thousands of entries) go straight into
// flat buffers; everything else (small) is built as a DOM for the validation code below.
class TokenizerSax final : public json::json_sax_t {
 public:
  struct Span {
    uint32_t off, len;
  };
  json root;  // the file without model.vocab / model.merges
  bool has_vocab = false, has_merges = false;
  std::string vocab_blob;                       // vocabulary strings back to back
  std::vector<std::pair<Span, int64_t>> vocab;  // [n_vocab] (string, id) in file order
  std::string merge_blob;                       // merge halves back to back
  std::vector<std::pair<Span, Span>> merges;    // [n_merges]
  std::string error;                            // set when a handler rejected the input

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override { return integer(v, json(v)); }
  bool number_unsigned(number_unsigned_t v) override {
    return integer(v > uint64_t(INT64_MAX) ? -1 : int64_t(v), json(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool string(string_t& v) override {
    if (mode_ == kMerges) return merge_string(v);
    if (mode_ == kPair) {
      if (pair_.size() >= 2) return bad_merge(json(v));
      pair_.push_back(v);
      return true;
    }
    return value(json(std::move(v)));
  }
  bool binary(binary_t&) override { return fail_with("unexpected binary value"); }
  bool start_object(std::size_t) override {
    if (mode_ == kDom && path_ == std::vector<std::string>{"", "model"} && key_ == "vocab") {
      mode_ = kVocab;
      has_vocab = true;
      return true;
    }
    if (mode_ != kDom)
      return mode_ == kVocab ? bad_vocab(json::object()) : bad_merge(json::object());
    return open(json::object());
  }
  bool key(string_t& k) override {
    if (mode_ == kVocab) {
      pending_ = {uint32_t(vocab_blob.size()), uint32_t(k.size())};
      vocab_blob += k;
      return true;
    }
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (mode_ == kVocab) {
      mode_ = kDom;
      return true;
    }
    return close();
  }
  bool start_array(std::size_t) override {
    if (mode_ == kDom && path_ == std::vector<std::string>{"", "model"} && key_ == "merges") {
      mode_ = kMerges;
      has_merges = true;
      return true;
    }
    if (mode_ == kMerges) {
      mode_ = kPair;
      pair_.clear();
      return true;
    }
    if (mode_ != kDom) return mode_ == kVocab ? bad_vocab(json::array()) : bad_merge(json::array());
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == kMerges) {
      mode_ = kDom;
      return true;
    }
    if (mode_ == kPair) {
      mode_ = kMerges;
      if (pair_.size() != 2) return bad_merge(json(pair_));
      add_merge(pair_[0], pair_[1]);
      return true;
    }
    return close();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    return fail_with(std::string("not valid JSON: ") + e.what());
  }

 private:
  enum Mode { kDom, kVocab, kMerges, kPair };
  Mode mode_ = kDom;
  std::vector<json*> stack_;       // open DOM containers
  std::vector<std::string> path_;  // key of each open container ("" for the root / in arrays)
  std::string key_;                // key of the next value in the current DOM object
  Span pending_{0, 0};             // the vocab key waiting for its id
  std::vector<std::string> pair_;  // halves of a ["a", "b"] merge

  bool fail_with(std::string msg) {
    if (error.empty()) error = std::move(msg);
    return false;
  }
  bool bad_vocab(const json& v) {
    return fail_with("model.vocab[\"" + vocab_blob.substr(pending_.off, pending_.len) +
                     "\"] = " + json_excerpt(v) + ": expected a non-negative integer id");
  }
  bool bad_merge(const json& v) {
    return fail_with("model.merges[" + std::to_string(merges.size()) + "] = " + json_excerpt(v) +
                     ": expected \"a b\" or [\"a\", \"b\"]");
  }
  Span put(const std::string& s) {
    Span sp{uint32_t(merge_blob.size()), uint32_t(s.size())};
    merge_blob += s;
    return sp;
  }
  void add_merge(const std::string& a, const std::string& b) {
    merges.emplace_back(put(a), put(b));
  }
  // "a b" (tokenizers < 0.20): exactly one space between two non-empty tokens.
  bool merge_string(const std::string& s) {
    const size_t sp = s.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() ||
        s.find(' ', sp + 1) != std::string::npos)
      return fail_with("model.merges[" + std::to_string(merges.size()) + "] = " +
                       json_excerpt(json(s)) + ": expected two tokens separated by one space");
    add_merge(s.substr(0, sp), s.substr(sp + 1));
    return true;
  }
  bool integer(int64_t v, json j) {
    if (mode_ == kVocab) {
      if (v < 0 || v > INT32_MAX - 1) return bad_vocab(j);
      vocab.emplace_back(pending_, v);
      return true;
    }
    return value(std::move(j));
  }
  json* insert(json v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[key_];
    slot = std::move(v);
    return &slot;
  }
  bool value(json v) {
    if (mode_ == kVocab) return bad_vocab(v);
    if (mode_ != kDom) return bad_merge(v);
    insert(std::move(v));
    return true;
  }
  bool open(json v) {
    const std::string k = stack_.empty() || stack_.back()->is_array() ? "" : key_;
    stack_.push_back(insert(std::move(v)));
    path_.push_back(k);
    return true;
  }
  bool close() {
    stack_.pop_back();
    path_.pop_back();
    return true;
  }
};

void load_model(const json& root, TokenizerSax& sax, Tokenizer::Impl& impl) {
  auto mit = root.find("model");
  if (mit == root.end() || !mit->is_object()) fail(impl, "missing 'model'");
  const json& model = *mit;
  const std::string t = type_of(model);
  if (t.empty() && sax.has_merges && sax.has_vocab) {
    // Old files omit the type of a BPE model.
  } else if (t != "BPE") {
    fail(impl, "unknown model type '" + t + "' (only BPE is supported)");
  }
  if (auto d = model.find("dropout");
      d != model.end() && !d->is_null() && !(d->is_number() && d->get<double>() == 0.0))
    fail(impl, "model.dropout = " + json_excerpt(*d) + " is not supported");
  require_empty_string(impl, model, "continuing_subword_prefix", "model");
  require_empty_string(impl, model, "end_of_word_suffix", "model");
  impl.ignore_merges = get_bool(model, "ignore_merges", false);
  if (!sax.has_vocab) fail(impl, "model.vocab missing or not an object");
  if (!sax.has_merges) fail(impl, "model.merges missing or not an array");

  // Id space: vocabulary ids and added-token ids.
  // Every table below has one entry per id up to the largest: bound it before allocating.
  constexpr int64_t kMaxId = detail::PairMap::kMaxValue - 1;
  int64_t max_id = -1;
  for (const auto& [span, id] : sax.vocab) {
    if (id > kMaxId)
      fail(impl, "model.vocab: id " + std::to_string(id) +
                     " is larger than the largest supported id " + std::to_string(kMaxId));
    max_id = std::max(max_id, id);
  }
  size_t added_bytes = 0;
  for (size_t i = 0; i < impl.added.size(); ++i) {
    const auto& t = impl.added[i];
    if (t.id > kMaxId)
      fail(impl, "added_tokens[" + std::to_string(i) + "]: id " + std::to_string(t.id) +
                     " is larger than the largest supported id " + std::to_string(kMaxId));
    max_id = std::max<int64_t>(max_id, t.id);
    added_bytes += t.content.size();
  }
  const auto n = static_cast<size_t>(max_id + 1);
  impl.n_ids = static_cast<int32_t>(n);
  impl.piece_blob = std::move(sax.vocab_blob);
  impl.piece_blob.reserve(impl.piece_blob.size() + added_bytes);  // no reallocation below
  impl.piece_span.assign(n, {0, 0});
  impl.present.assign(n, 0);
  for (const auto& [span, id] : sax.vocab) {
    if (impl.present[id]) fail(impl, "model.vocab: id " + std::to_string(id) + " is used twice");
    impl.present[id] = 1;
    impl.piece_span[id] = {span.off, span.len};
  }
  const auto key_of = [&impl](int32_t id) { return impl.piece_of(id); };
  impl.piece_index.reset(sax.vocab.size() + impl.added.size());
  for (const auto& [span, id] : sax.vocab) impl.piece_index.put(impl.piece_of(id), id, key_of);

  // The token of every single byte.
  const auto& alphabet = unicode::byte_to_codepoint();
  for (int b = 0; b < 256; ++b) {
    std::string piece;
    unicode::append_utf8(piece, alphabet[b]);
    const int32_t id = impl.find_piece(piece);
    if (id < 0) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", b);
      fail(impl, std::string("model.vocab has no token for byte ") + hex +
                     " (not a byte-level BPE vocabulary)");
    }
    impl.byte_id[b] = id;
  }

  if (impl.n_ids > detail::PairMap::kMaxValue ||
      sax.merges.size() > size_t(detail::PairMap::kMaxValue))
    fail(impl, "more than " + std::to_string(detail::PairMap::kMaxValue) +
                   " tokens or merges are not supported");
  impl.merges.reserve(sax.merges.size());
  std::string joined;
  const std::string_view blob(sax.merge_blob);
  for (size_t i = 0; i < sax.merges.size(); ++i) {
    const std::string_view a = blob.substr(sax.merges[i].first.off, sax.merges[i].first.len);
    const std::string_view b = blob.substr(sax.merges[i].second.off, sax.merges[i].second.len);
    joined.assign(a);
    joined += b;
    const int32_t ia = impl.find_piece(a), ib = impl.find_piece(b), im = impl.find_piece(joined);
    const auto where = [&] { return "model.merges[" + std::to_string(i) + "]"; };
    if (ia < 0) fail(impl, where() + ": '" + std::string(a) + "' is not in the vocabulary");
    if (ib < 0) fail(impl, where() + ": '" + std::string(b) + "' is not in the vocabulary");
    if (im < 0)
      fail(impl, where() + ": the merged token '" + joined + "' is not in the vocabulary");
    impl.merges.put(ia, ib, int32_t(i), im);
  }
  // Every piece starts as bytes: their pair ranks come from a dense 256 KiB table.
  impl.byte_pair_rank.assign(256 * 256, -1);
  for (int b1 = 0; b1 < 256; ++b1)
    for (int b2 = 0; b2 < 256; ++b2)
      impl.byte_pair_rank[b1 * 256 + b2] = impl.merges.rank(impl.byte_id[b1], impl.byte_id[b2]);

  // Added tokens (after the merges, which refer to the vocabulary only): their contents join the
  // piece blob and shadow an equal vocabulary string in piece_to_id, as in Hugging Face.
  impl.special.assign(n, 0);
  for (size_t k = 0; k < impl.added.size(); ++k) {
    const auto& t = impl.added[k];
    impl.present[t.id] = 1;
    impl.special[t.id] = t.special ? 1 : 0;
    impl.piece_span[t.id] = {uint32_t(impl.piece_blob.size()), uint32_t(t.content.size())};
    impl.piece_blob += t.content;
    impl.piece_index.put(t.content, t.id, key_of);
    (t.normalized ? impl.norm_trie : impl.raw_trie).add(t.content, static_cast<int32_t>(k));
  }
}

void load_added_tokens(const json& root, Tokenizer::Impl& impl) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return;
  if (!it->is_array()) fail(impl, "added_tokens is not an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& a = (*it)[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!a.is_object()) fail(impl, where + " is not an object");
    auto id = a.find("id");
    auto content = a.find("content");
    if (id == a.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > INT32_MAX - 1)
      fail(impl, where + ": missing or invalid 'id'");
    if (content == a.end() || !content->is_string() || content->get<std::string>().empty())
      fail(impl, where + ": missing or empty 'content'");
    detail::AddedToken t;
    t.content = content->get<std::string>();
    if (!unicode::is_valid_utf8(t.content)) fail(impl, where + ": content is not valid UTF-8");
    t.id = static_cast<int32_t>(id->get<int64_t>());
    t.special = get_bool(a, "special", false);
    t.lstrip = get_bool(a, "lstrip", false);
    t.rstrip = get_bool(a, "rstrip", false);
    t.normalized = get_bool(a, "normalized", !t.special);
    t.single_word = get_bool(a, "single_word", false);
    impl.added.push_back(std::move(t));
  }
}

}  // namespace

void load_tokenizer_json(std::string_view text, Tokenizer::Impl& impl) {
  check_json_depth(text, impl.origin);
  TokenizerSax sax;
  if (!json::sax_parse(text.begin(), text.end(), &sax) || !sax.error.empty())
    fail(impl, sax.error.empty() ? std::string("not valid JSON") : sax.error);
  const json& root = sax.root;
  if (!root.is_object()) fail(impl, "top level is not a JSON object");

  load_added_tokens(root, impl);
  load_model(root, sax, impl);
  load_normalizer(root, impl);
  load_pre_tokenizer(root, impl);
  load_decoder(root, impl);

  const int32_t n = impl.n_ids;
  std::vector<uint8_t> is_added(static_cast<size_t>(n), 0);
  for (const auto& t : impl.added) is_added[t.id] = 1;

  // Raw bytes of every id: byte-level decoded vocabulary strings, added tokens verbatim.
  impl.bytes_off.assign(static_cast<size_t>(n) + 1, 0);
  impl.bytes_blob.clear();
  impl.bytes_blob.reserve(impl.piece_blob.size());
  std::string raw;
  for (int32_t id = 0; id < n; ++id) {
    impl.bytes_off[id] = static_cast<uint32_t>(impl.bytes_blob.size());
    if (!impl.present[id]) continue;
    const std::string_view piece = impl.piece_of(id);
    raw.clear();
    if (!is_added[id] && unicode::byte_level_to_bytes(piece, raw)) {
      impl.bytes_blob += raw;
    } else {
      impl.bytes_blob += piece;  // added tokens, and strings outside the byte alphabet
    }
  }
  impl.bytes_off[n] = static_cast<uint32_t>(impl.bytes_blob.size());
  if (impl.ignore_merges) {
    for (int32_t id = 0; id < n; ++id)
      if (impl.present[id] && !is_added[id]) impl.bytes_to_id.emplace(impl.bytes_of(id), id);
  }
}

}  // namespace mmrt::io
