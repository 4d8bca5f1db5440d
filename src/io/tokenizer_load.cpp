// tokenizer.json parsing and validation: every problem becomes a FormatError that names the
// file and the field.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "io/json_fields.h"
#include "io/tokenizer_internal.h"
#include "io/tokenizer_sax.h"

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

// A Replace step (normaliser or decoder) of a literal, non-empty string: (from, to).
std::pair<std::string, std::string> literal_replace(const Tokenizer::Impl& impl, const json& d,
                                                    const std::string& where) {
  auto pat = d.find("pattern");
  auto c = d.find("content");
  if (pat == d.end() || !pat->is_object() || !pat->contains("String") ||
      !(*pat)["String"].is_string() || (*pat)["String"].get<std::string>().empty())
    fail(impl, where + ": Replace is supported with a literal {\"String\": ...} pattern only");
  if (c == d.end() || !c->is_string()) fail(impl, where + ": Replace without 'content'");
  return {(*pat)["String"].get<std::string>(), c->get<std::string>()};
}

void load_normalizer(const json& root, Tokenizer::Impl& impl) {
  auto it = root.find("normalizer");
  if (it == root.end() || it->is_null()) return;
  using Step = Tokenizer::Impl::NormStep;
  auto one = [&](const json& n, const std::string& where) {
    const std::string t = type_of(n);
    if (t == "NFC") {
      impl.norm.push_back({Step::kNfc, "", ""});
    } else if (t == "Prepend" && impl.sentencepiece) {
      auto p = n.find("prepend");
      if (p == n.end() || !p->is_string()) fail(impl, where + ": Prepend without 'prepend'");
      impl.norm.push_back({Step::kPrepend, p->get<std::string>(), ""});
    } else if (t == "Replace" && impl.sentencepiece) {
      auto [from, to] = literal_replace(impl, n, where);
      impl.norm.push_back({Step::kReplace, std::move(from), std::move(to)});
    } else {
      fail(impl, where + ": normalizer type '" + t + "' is not supported (" +
                     (impl.sentencepiece ? "NFC, Prepend, Replace" : "only NFC") + ")");
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
  impl.nfc = impl.norm.size() == 1 && impl.norm[0].kind == Step::kNfc;
}

// Whether the file is a SentencePiece-style BPE: its pre-tokenizer has no ByteLevel step.
bool is_sentencepiece(const json& root) {
  auto it = root.find("pre_tokenizer");
  if (it == root.end() || it->is_null()) return true;
  if (type_of(*it) == "ByteLevel") return false;
  if (type_of(*it) == "Sequence")
    if (auto ps = it->find("pretokenizers"); ps != it->end() && ps->is_array())
      for (const json& p : *ps)
        if (type_of(p) == "ByteLevel") return false;
  return true;
}

// SentencePiece-style pre-tokenizers: none, or Metaspace.
void load_sp_pre_tokenizer(const json& root, Tokenizer::Impl& impl) {
  auto it = root.find("pre_tokenizer");
  if (it == root.end() || it->is_null()) return;
  const json* p = &*it;
  std::string where = "pre_tokenizer";
  if (type_of(*p) == "Sequence") {
    auto ps = p->find("pretokenizers");
    if (ps == p->end() || !ps->is_array() || ps->size() != 1)
      fail(impl, "pre_tokenizer: a Sequence is supported with one Metaspace step only");
    p = &(*ps)[0];
    where += ".pretokenizers[0]";
  }
  const std::string t = type_of(*p);
  if (t != "Metaspace")
    fail(impl, where + ": pre-tokenizer type '" + t +
                   "' is not supported (ByteLevel with Split, or Metaspace, or none)");
  auto& m = impl.metaspace;
  m.on = true;
  if (auto r = p->find("replacement"); r != p->end()) {
    if (!r->is_string() || r->get<std::string>().empty() ||
        !unicode::is_valid_utf8(r->get<std::string>()))
      fail(impl, where + ".replacement must be a non-empty string");
    m.replacement = r->get<std::string>();
  }
  // Older files: add_prefix_space (true: always); newer: prepend_scheme.
  m.prepend = get_bool(*p, "add_prefix_space", true) ? Tokenizer::Impl::Metaspace::kAlways
                                                     : Tokenizer::Impl::Metaspace::kNever;
  if (auto ps = p->find("prepend_scheme"); ps != p->end() && !ps->is_null()) {
    const std::string v = ps->is_string() ? ps->get<std::string>() : "";
    if (v == "always")
      m.prepend = Tokenizer::Impl::Metaspace::kAlways;
    else if (v == "first")
      m.prepend = Tokenizer::Impl::Metaspace::kFirst;
    else if (v == "never")
      m.prepend = Tokenizer::Impl::Metaspace::kNever;
    else
      fail(impl,
           where + ".prepend_scheme = " + json_excerpt(*ps) + " (expected always, first or never)");
    if (!get_bool(*p, "add_prefix_space", true)) m.prepend = Tokenizer::Impl::Metaspace::kNever;
  }
  m.split = get_bool(*p, "split", true);
}

// SentencePiece-style decoder: Sequence[Replace(U+2581 -> " "), ByteFallback, Fuse,
// Strip(" ", n, 0)] in that order (Replace and Strip optional).
void load_sp_decoder(const json& root, Tokenizer::Impl& impl, std::string& replace_from,
                     std::string& replace_to, bool& byte_tokens) {
  auto it = root.find("decoder");
  if (it == root.end() || it->is_null() || type_of(*it) != "Sequence")
    fail(impl,
         "decoder: a SentencePiece-style tokenizer needs a Sequence decoder (Replace, "
         "ByteFallback, Fuse, Strip), not " +
             (it == root.end() ? std::string("none") : json_excerpt(*it)));
  auto ds = it->find("decoders");
  if (ds == it->end() || !ds->is_array()) fail(impl, "decoder: Sequence without 'decoders'");
  int stage = 0;  // 0: Replace allowed, 1: after ByteFallback, 2: after Fuse, 3: after Strip
  for (size_t i = 0; i < ds->size(); ++i) {
    const json& d = (*ds)[i];
    const std::string where = "decoder.decoders[" + std::to_string(i) + "]";
    const std::string t = type_of(d);
    if (t == "Replace" && stage == 0 && replace_from.empty()) {
      std::tie(replace_from, replace_to) = literal_replace(impl, d, where);
    } else if (t == "ByteFallback" && stage == 0) {
      byte_tokens = true;
      stage = 1;
    } else if (t == "Fuse" && stage <= 1) {
      stage = 2;
    } else if (t == "Strip" && stage == 2) {
      const std::string content = d.value("content", std::string());
      const json start = d.value("start", json(0)), stop = d.value("stop", json(0));
      if (content != " " || !start.is_number_unsigned() || start.get<uint64_t>() > 16 ||
          !(stop.is_number_integer() && stop.get<int64_t>() == 0))
        fail(impl, where +
                       ": Strip is supported for leading spaces only (content \" \", start "
                       "<= 16, stop 0), not " +
                       json_excerpt(d));
      impl.strip_leading = static_cast<int32_t>(start.get<uint64_t>());
      stage = 3;
    } else {
      fail(impl, where + ": decoder '" + t +
                     "' is not supported here (expected Replace, ByteFallback, Fuse, Strip in "
                     "that order)");
    }
  }
  if (stage < 2) fail(impl, "decoder: a SentencePiece-style Sequence decoder needs Fuse");
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

// The id space shared by both models: every vocabulary string and added token gets its id's
// slot (bounded before anything is sized by it); vocabulary strings are indexed for lookups.
void load_vocabulary(detail::TokenizerSax& sax, Tokenizer::Impl& impl) {
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
}

// The <0xNN> token of each byte (SentencePiece-style vocabularies); all 256 when byte_fallback.
void load_fallback_ids(Tokenizer::Impl& impl) {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    impl.fallback_id[b] = impl.find_piece(name);
    if (impl.byte_fallback && impl.fallback_id[b] < 0)
      fail(impl, std::string("model.byte_fallback is set but the vocabulary has no ") + name);
  }
}

// Added tokens (after the model, whose vocabulary they may shadow): their contents join the
// piece blob and shadow an equal vocabulary string in piece_to_id, as in Hugging Face.
void register_added_tokens(Tokenizer::Impl& impl) {
  const auto key_of = [&impl](int32_t id) { return impl.piece_of(id); };
  impl.special.assign(size_t(impl.n_ids), 0);
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

// A Unigram model: {"type": "Unigram", "unk_id": N, "vocab": [["piece", score], ...],
// "byte_fallback": bool}; the id of a piece is its index.
void load_unigram(const json& model, detail::TokenizerSax& sax, Tokenizer::Impl& impl) {
  if (!impl.sentencepiece)
    fail(impl, "a Unigram model with a ByteLevel pre-tokenizer is not supported");
  if (!sax.vocab_is_array)
    fail(impl, "model.vocab of a Unigram model must be an array of [\"piece\", score] entries");
  if (sax.has_merges) fail(impl, "model.merges in a Unigram model");
  if (sax.vocab.empty()) fail(impl, "model.vocab is empty");
  impl.unigram = true;
  impl.byte_fallback = get_bool(model, "byte_fallback", false);
  load_vocabulary(sax, impl);
  auto u = model.find("unk_id");
  if (u == model.end() || u->is_null())
    fail(impl, "model.unk_id: a Unigram model without an unknown token is not supported");
  if (!u->is_number_integer() || u->get<int64_t>() < 0 ||
      u->get<int64_t>() >= static_cast<int64_t>(sax.vocab.size()))
    fail(impl, "model.unk_id = " + json_excerpt(*u) + " is not an index of model.vocab (" +
                   std::to_string(sax.vocab.size()) + " entries)");
  impl.unk_id = static_cast<int32_t>(u->get<int64_t>());
  load_fallback_ids(impl);
  impl.scores.assign(size_t(impl.n_ids), 0.0);
  double min_score = sax.scores[0];
  try {
    for (size_t i = 0; i < sax.vocab.size(); ++i) {
      const auto id = static_cast<int32_t>(sax.vocab[i].second);
      impl.scores[size_t(id)] = sax.scores[i];
      min_score = std::min(min_score, sax.scores[i]);
      impl.trie.add(impl.piece_of(id), id);
    }
  } catch (const std::length_error&) {
    fail(impl, "model.vocab: the strings are too many or too long for the Unigram trie (" +
                   std::to_string(impl.piece_blob.size()) + " bytes)");
  }
  impl.unk_score = min_score - 10.0;  // Hugging Face's K_UNK_PENALTY
  register_added_tokens(impl);
}

void load_bpe(const json& model, detail::TokenizerSax& sax, Tokenizer::Impl& impl) {
  if (auto d = model.find("dropout");
      d != model.end() && !d->is_null() && !(d->is_number() && d->get<double>() == 0.0))
    fail(impl, "model.dropout = " + json_excerpt(*d) + " is not supported");
  require_empty_string(impl, model, "continuing_subword_prefix", "model");
  require_empty_string(impl, model, "end_of_word_suffix", "model");
  impl.ignore_merges = get_bool(model, "ignore_merges", false);
  impl.byte_fallback = get_bool(model, "byte_fallback", false);
  impl.fuse_unk = get_bool(model, "fuse_unk", false);
  if (impl.byte_fallback && !impl.sentencepiece)
    fail(impl, "model.byte_fallback with a ByteLevel pre-tokenizer is not supported");
  if (!sax.has_vocab || sax.vocab_is_array) fail(impl, "model.vocab missing or not an object");
  if (!sax.has_merges) fail(impl, "model.merges missing or not an array");
  load_vocabulary(sax, impl);

  if (impl.sentencepiece) {
    load_fallback_ids(impl);
    if (auto u = model.find("unk_token"); u != model.end() && !u->is_null()) {
      if (!u->is_string()) fail(impl, "model.unk_token = " + json_excerpt(*u) + ": not a string");
      impl.unk_id = impl.find_piece(u->get<std::string>());
      if (impl.unk_id < 0)
        fail(impl, "model.unk_token '" + u->get<std::string>() + "' is not in the vocabulary");
    }
  }
  // The token of every single byte.
  const auto& alphabet = unicode::byte_to_codepoint();
  for (int b = 0; b < 256 && !impl.sentencepiece; ++b) {
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
  // Every byte-level piece starts as bytes: their pair ranks come from a dense 256 KiB table.
  if (!impl.sentencepiece) {
    impl.byte_pair_rank.assign(256 * 256, -1);
    for (int b1 = 0; b1 < 256; ++b1)
      for (int b2 = 0; b2 < 256; ++b2)
        impl.byte_pair_rank[b1 * 256 + b2] = impl.merges.rank(impl.byte_id[b1], impl.byte_id[b2]);
  }
  register_added_tokens(impl);
}

void load_model(const json& root, detail::TokenizerSax& sax, Tokenizer::Impl& impl) {
  auto mit = root.find("model");
  if (mit == root.end() || !mit->is_object()) fail(impl, "missing 'model'");
  const json& model = *mit;
  const std::string t = type_of(model);
  if (t == "Unigram") {
    load_unigram(model, sax, impl);
  } else if (t == "BPE" || (t.empty() && sax.has_merges && sax.has_vocab)) {
    load_bpe(model, sax, impl);  // old files omit the type of a BPE model
  } else {
    fail(impl, "unknown model type '" + t + "' (BPE and Unigram are supported)");
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
  detail::TokenizerSax sax;
  if (!json::sax_parse(text.begin(), text.end(), &sax) || !sax.error.empty())
    fail(impl, sax.error.empty() ? std::string("not valid JSON") : sax.error);
  const json& root = sax.root;
  if (!root.is_object()) fail(impl, "top level is not a JSON object");

  impl.sentencepiece = is_sentencepiece(root);
  load_added_tokens(root, impl);
  load_model(root, sax, impl);
  load_normalizer(root, impl);
  std::string sp_from, sp_to;
  bool sp_bytes = false;
  if (impl.sentencepiece) {
    load_sp_pre_tokenizer(root, impl);
    load_sp_decoder(root, impl, sp_from, sp_to, sp_bytes);
  } else {
    load_pre_tokenizer(root, impl);
    load_decoder(root, impl);
  }

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
    if (impl.sentencepiece) {
      // The decoder's chain on this token alone (Replace, then ByteFallback: "<0xNN>").
      std::string t =
          sp_from.empty() ? std::string(piece) : detail::replace_all(piece, sp_from, sp_to);
      auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
      if (sp_bytes && t.size() == 6 && t.starts_with("<0x") && t[5] == '>' && hex(t[3]) &&
          hex(t[4]))
        t = std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
      impl.bytes_blob += t;
    } else if (!is_added[id] && unicode::byte_level_to_bytes(piece, raw)) {
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
