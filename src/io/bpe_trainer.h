// Learns a small byte-level BPE vocabulary and writes it as a Hugging Face tokenizer.json in the
// exact Qwen2 format (NFC normaliser, Split regex + ByteLevel pre-tokenizer, BPE model, ByteLevel
// decoder, added_tokens). Used by make-tiny-model so tiny checkpoints carry a real tokenizer file.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mmrt::io {

struct BpeTrainOptions {
  int32_t vocab_size = 2048;  // ordinary tokens: 256 byte tokens + learned merges
  // Added (special) tokens appended after the ordinary vocabulary, ids vocab_size, +1, ...
  // (empty: none), e.g. a model family's chat specials.
  std::vector<std::string> special_tokens;
  // Id of the first special token. -1: right after the ordinary vocabulary (vocab_size);
  // otherwise the specials start at that id (>= vocab_size), leaving a gap, so a tiny vocabulary
  // can keep Qwen2's real special ids (151643..151656).
  int32_t special_first_id = -1;
};

// Returns the tokenizer.json text learned from `corpus` (UTF-8 text).
std::string train_byte_level_bpe(const std::string& corpus, const BpeTrainOptions& opts);

// A few kilobytes of varied built-in text (English, code, numbers, CJK, emoji) to learn from.
const std::string& builtin_training_corpus();

}  // namespace mmrt::io
