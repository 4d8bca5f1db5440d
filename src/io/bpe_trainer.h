// Learns a small BPE vocabulary and writes it as a Hugging Face tokenizer.json: byte-level in the
// exact Qwen2 format (NFC normaliser, Split regex + ByteLevel pre-tokenizer, BPE model, ByteLevel
// decoder, added_tokens), or SentencePiece-style with byte fallback in the exact layout of the
// LlamaTokenizerFast files of Llama-2 / Mistral / LLaVA. Used by make-tiny-model so tiny
// checkpoints carry a real tokenizer file.
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

struct SentencePieceTrainOptions {
  // Ordinary tokens: <unk>, <s>, </s> (ids 0, 1, 2), the 256 <0xNN> byte tokens (ids 3..258),
  // then the characters of the corpus ("▁" for the space among them) by frequency, then merges.
  int32_t vocab_size = 1000;
  // Added (special) tokens after the ordinary vocabulary, ids vocab_size, +1, ... (or from
  // special_first_id, leaving a gap), e.g. LLaVA's "<image>", "<pad>".
  std::vector<std::string> special_tokens;
  int32_t special_first_id = -1;  // -1: right after the ordinary vocabulary
  // "legacy": normaliser Sequence[Prepend("▁"), Replace(" ", "▁")], no pre-tokenizer (Llama-2,
  // Mistral v0.1-0.2 files); "metaspace": no normaliser, pre-tokenizer Metaspace(replacement "▁",
  // prepend_scheme "first", split false) (files converted with legacy=false). Both: the decoder
  // Sequence[Replace("▁" -> " "), ByteFallback, Fuse, Strip(" ", 1, 0)], BOS by TemplateProcessing.
  std::string style = "legacy";
};

// Returns the SentencePiece-style tokenizer.json learned from `corpus` (UTF-8 text; invalid
// bytes read as U+FFFD). Words are runs of "▁" plus the characters after them (SentencePiece's
// split with whitespace-only pieces allowed), so a piece may start with "▁" but has none after
// another character. Control characters (Unicode Cc: newline, tab, ...) and the characters that
// do not fit in vocab_size are left out of the vocabulary and encode as <0xNN> byte tokens.
// Merges (the shared loop: most frequent pair first, ties to the smaller id pair) never produce
// the string of a fixed or special token, nor a piece of more than 16 characters (SentencePiece's
// max_piece_length). Training stops at vocab_size or when no pair is left. InvalidArgument for
// vocab_size < 260, an unknown style or bad special tokens.
std::string train_sentencepiece_bpe(const std::string& corpus,
                                    const SentencePieceTrainOptions& opts);

struct SentencePieceUnigramOptions {
  // Pieces in all: <unk>, <s>, </s> (ids 0, 1, 2), then user_pieces, then the 256 <0xNN> byte
  // pieces (all scored 0), then the learned pieces by score (the most likely first).
  int32_t vocab_size = 1000;
  // Pieces that text matches as any other (scored 0, so always preferred), e.g. Fuyu's
  // "|SPEAKER|", "|NEWLINE|", "|ENDOFTEXT|". No spaces (the normaliser leaves none to match).
  std::vector<std::string> user_pieces;
  // Of <s>, </s> and user_pieces, those also listed in added_tokens as special (<unk> always is).
  std::vector<std::string> added_specials;
  // The token the post-processor puts before a sequence (<s>, or an added special; empty: no
  // post-processor).
  std::string prefix_token = "<s>";
  std::string style = "legacy";  // as SentencePieceTrainOptions::style
};

// Returns a Unigram tokenizer.json in the layout of Fuyu's (model {"type": "Unigram", "unk_id":
// 0, "vocab": [["piece", score], ...], "byte_fallback": true}, the SentencePiece decoder). Its
// pieces are those SentencePiece-style BPE learns from `corpus` (as train_sentencepiece_bpe), each
// scored with its log-probability in the corpus segmented by the merges (half a count added): a
// valid Unigram model with sensible segmentations, not one trained by EM as SentencePiece's
// Unigram trainer does. InvalidArgument for a vocab_size below the fixed pieces + 1, an unknown
// style, or bad user pieces.
std::string train_sentencepiece_unigram(const std::string& corpus,
                                        const SentencePieceUnigramOptions& opts);

// A few kilobytes of varied built-in text (English, code, numbers, CJK, emoji) to learn from.
const std::string& builtin_training_corpus();

}  // namespace mmrt::io
