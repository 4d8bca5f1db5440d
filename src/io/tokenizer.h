// BPE tokenizer loaded from a Hugging Face tokenizer.json: byte-level (Qwen2 / Qwen2.5 / Qwen3
// vocabularies) or SentencePiece-style with byte fallback (Llama, Mistral: U+2581 for spaces,
// <0xNN> tokens for characters outside the vocabulary), and a streaming detokenizer that never
// emits half a UTF-8 character.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mmrt::io {

class Tokenizer {
 public:
  // Throws NotFound / FormatError with the file name and the problem.
  static Tokenizer from_file(const std::string& tokenizer_json_path);
  static Tokenizer from_json(std::string_view tokenizer_json_text, const std::string& origin);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Split out added/special tokens (exact match), normalise (NFC; SentencePiece: prepend and
  // replace U+2581), pre-tokenize, BPE. Adds no special tokens (no BOS); invalid UTF-8 input is
  // read as U+FFFD. Safe to call from several threads.
  std::vector<int32_t> encode(std::string_view text) const;
  // Concatenate token strings, undo the byte map (SentencePiece: U+2581 -> space, <0xNN> ->
  // the byte, then the decoder's Strip of leading spaces); invalid UTF-8 becomes U+FFFD.
  // skip_special drops tokens marked special in added_tokens. Throws InvalidArgument naming an
  // id outside [0, vocab_size()) or one that no token has (a gap in the id space).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  // Raw bytes of one token (for streaming); special tokens give their content.
  std::string token_bytes(int32_t id) const;
  std::string id_to_piece(int32_t id) const;  // the vocabulary string as stored
  std::optional<int32_t> piece_to_id(std::string_view piece) const;  // vocab or added token
  bool is_special(int32_t id) const;
  int32_t vocab_size() const;  // max id + 1 over vocab and added tokens
  // Leading spaces decode() removes from its text (SentencePiece decoders strip the space the
  // encoder prepended; 0 for byte-level).
  int32_t leading_spaces_stripped() const;
  // encode() keeps small caches of short pre-token -> ids, one per concurrent call, owned by
  // the tokenizer; this forgets all of them (benchmarks of cold encoding).
  void clear_cache() const;

  struct Impl;  // opaque (io/tokenizer_internal.h)

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of token ids into UTF-8 text pieces, holding back incomplete multi-byte
// sequences until they complete (or become invalid, then emitted as U+FFFD). The concatenated
// output of push()... plus flush() equals Tokenizer::decode() of the same ids. One per stream;
// `tok` must outlive it.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tok, bool skip_special = true);
  std::string push(int32_t id);  // text that became complete with this token (may be empty)
  std::string flush();           // whatever is held back, with U+FFFD for an incomplete tail

 private:
  std::string strip(std::string out);  // the tokenizer's leading-space strip, once per stream
  const Tokenizer* tok_;
  bool skip_special_;
  int32_t strip_ = 0;
  std::string pending_;
};

}  // namespace mmrt::io
