// Internal to tokenizer_load.cpp (not a public header): the SAX handler that reads a
// tokenizer.json without building a DOM for its largest parts.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/json_fields.h"

namespace mmrt::io::detail {

// SAX handler: model.vocab and model.merges (hundreds of thousands of entries) go straight into
// flat buffers; everything else (small) is built as a DOM for the validation code below. The
// vocabulary is a {"piece": id} object (BPE) or a [["piece", score], ...] array (Unigram, where
// the id is the index).
class TokenizerSax final : public nlohmann::json::json_sax_t {
 public:
  using json = nlohmann::json;
  struct Span {
    uint32_t off, len;
  };
  json root;  // the file without model.vocab / model.merges
  bool has_vocab = false, has_merges = false;
  std::string vocab_blob;                       // vocabulary strings back to back
  std::vector<std::pair<Span, int64_t>> vocab;  // [n_vocab] (string, id) in file order
  bool vocab_is_array = false;                  // the Unigram form
  std::vector<double> scores;                   // [n_vocab] Unigram log-probabilities
  std::string merge_blob;                       // merge halves back to back
  std::vector<std::pair<Span, Span>> merges;    // [n_merges]
  std::string error;                            // set when a handler rejected the input

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override { return integer(v, json(v)); }
  bool number_unsigned(number_unsigned_t v) override {
    return integer(v > uint64_t(INT64_MAX) ? -1 : int64_t(v), json(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    if (mode_ == kEntry) return entry_score(v, json(v));
    return value(json(v));
  }
  bool string(string_t& v) override {
    if (mode_ == kEntry) {
      if (entry_n_++ != 0) return bad_entry(json(v));
      pending_ = {uint32_t(vocab_blob.size()), uint32_t(v.size())};
      vocab_blob += v;
      return true;
    }
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
    if (mode_ == kArrayVocab || mode_ == kEntry) return bad_entry(json::object());
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
    if (mode_ == kDom && path_ == std::vector<std::string>{"", "model"} && key_ == "vocab") {
      mode_ = kArrayVocab;
      has_vocab = vocab_is_array = true;
      return true;
    }
    if (mode_ == kArrayVocab) {
      mode_ = kEntry;
      entry_n_ = 0;
      return true;
    }
    if (mode_ == kEntry) return bad_entry(json::array());
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
    if (mode_ == kArrayVocab) {
      mode_ = kDom;
      return true;
    }
    if (mode_ == kEntry) {
      if (entry_n_ != 2) return bad_entry(json::array());
      vocab.emplace_back(pending_, int64_t(vocab.size()));
      mode_ = kArrayVocab;
      return true;
    }
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
    return fail_with("not valid JSON: " + io::json_error_text(e));
  }

 private:
  enum Mode { kDom, kVocab, kMerges, kPair, kArrayVocab, kEntry };
  Mode mode_ = kDom;
  std::vector<json*> stack_;       // open DOM containers
  std::vector<std::string> path_;  // key of each open container ("" for the root / in arrays)
  std::string key_;                // key of the next value in the current DOM object
  Span pending_{0, 0};             // the vocab key waiting for its id
  std::vector<std::string> pair_;  // halves of a ["a", "b"] merge
  int entry_n_ = 0;                // values seen in the current ["piece", score] entry

  bool fail_with(std::string msg) {
    if (error.empty()) error = std::move(msg);
    return false;
  }
  bool bad_vocab(const json& v) {
    return fail_with("model.vocab[\"" + vocab_blob.substr(pending_.off, pending_.len) +
                     "\"] = " + json_excerpt(v) + ": expected a non-negative integer id");
  }
  bool bad_entry(const json& v) {
    return fail_with("model.vocab[" + std::to_string(vocab.size()) + "]: " + json_excerpt(v) +
                     " where a [\"piece\", score] entry was expected");
  }
  // The score of a Unigram entry: a finite number after its piece.
  bool entry_score(double v, const json& j) {
    if (entry_n_++ != 1 || !std::isfinite(v)) return bad_entry(j);
    scores.push_back(v);
    return true;
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
    if (mode_ == kEntry) return entry_score(j.get<double>(), j);
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
    if (mode_ == kArrayVocab || mode_ == kEntry) return bad_entry(v);
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

}  // namespace mmrt::io::detail
