// The family-neutral part of make-tiny-model: the output folder, the tokenizer (copied in or
// trained with the built-in byte-level or SentencePiece-style BPE trainer) and what config.json
// needs from it, tokenizer_config.json and generation_config.json in the Qwen2 layout, and seeded
// random weights streamed straight into safetensors. Each family's tiny_checkpoint.cpp adds its
// config.json, its preprocessor_config.json and its tensor table.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "models/model.h"

namespace mmrt {
class ThreadPool;
}

namespace mmrt::models::tiny {

// Creates `out_dir` (and parents); FailedPrecondition when that fails.
std::filesystem::path create_output_dir(const std::string& out_dir);
// Writes `text` to `path` (truncating); FailedPrecondition when that fails.
void write_file(const std::filesystem::path& path, const std::string& text);
// InvalidArgument unless `dtype` is bf16 or f32 (the dtypes make-tiny-model writes).
void check_dtype(DType dtype);

// What make-tiny-model needs from a tokenizer.json: its size and the added tokens.
struct TokenizerFacts {
  int32_t size = 0;                          // max id + 1 over the vocabulary and the added tokens
  nlohmann::json added_tokens;               // the "added_tokens" array as stored
  std::map<std::string, int64_t> added_ids;  // content -> id
};

struct Tokenizer {
  std::string text;    // tokenizer.json as written
  std::string origin;  // the copied file's path, or "trained tokenizer"
  TokenizerFacts facts;
};

struct TokenizerOptions {
  std::string path;                   // a tokenizer.json to copy in; empty: train one
  int32_t vocab_size = 1000;          // ordinary tokens of a trained tokenizer
  std::vector<std::string> specials;  // the family's special tokens, in id order
  int32_t special_first_id = -1;      // -1: right after the ordinary tokens
  // What a trained tokenizer is: byte-level BPE in the Qwen2 layout, SentencePiece-style BPE with
  // byte fallback in the Llama / Mistral layout (legacy normaliser; <unk> <s> </s> = 0 1 2), or a
  // Unigram model in Fuyu's layout (the specials are vocabulary pieces scored 0 after <unk> <s>
  // </s>; special_first_id is not used).
  enum class Style { kByteLevel, kSentencePiece, kUnigram } style = Style::kByteLevel;
  std::vector<std::string> unigram_added;  // kUnigram: specials also listed as added tokens
  std::string unigram_prefix;              // kUnigram: the post-processor's leading token
};
Tokenizer make_tokenizer(const TokenizerOptions& opts);

// Gives every id below `n_ids` that the tokenizer leaves unassigned (the gap below specials kept
// at their real ids, the padding up to the model's vocabulary) a vocabulary piece of its own, so
// that any id a random model samples decodes to " x<id>": "Ġx<id>" in a byte-level vocabulary,
// "▁x<id>" in a SentencePiece-style one (no ByteLevel pre-tokenizer). No merge produces the piece
// and it is longer than one character, so text never encodes to it. A Unigram vocabulary (ids are
// indices) grows at its end by " x<id>" pieces, which hold a space no normalised text has.
// Rewrites tok.text and tok.facts.
void fill_unassigned_ids(Tokenizer& tok, int32_t n_ids);

// tokenizer_config.json's "added_tokens_decoder": id -> the added token's content and flags
// (lstrip, normalized, rstrip, single_word false and special true unless the token says).
template <typename Json>
Json added_tokens_decoder(const TokenizerFacts& facts) {
  Json decoder = Json::object();
  for (const auto& t : facts.added_tokens) {
    Json e;
    e["content"] = t.value("content", "");
    for (const char* k : {"lstrip", "normalized", "rstrip", "single_word", "special"})
      e[k] = t.value(k, std::string(k) == "special");
    decoder[std::to_string(t.value("id", int64_t{0}))] = e;
  }
  return decoder;
}

// The id of added token `token`; InvalidArgument naming the family when the tokenizer lacks it.
int64_t special_id(const Tokenizer& tok, const std::string& token, const std::string& family);

// tokenizer_config.json of a Qwen2 tokenizer: every added token, the family's specials (but
// <|endoftext|>) as additional_special_tokens, eos <|im_end|>, pad <|endoftext|>.
std::string tokenizer_config_json(const TokenizerFacts& facts,
                                  const std::vector<std::string>& specials,
                                  const std::string& chat_template, int64_t model_max_length);
// generation_config.json: bos, eos = [eos, endoftext], pad = endoftext.
std::string generation_config_json(int64_t bos, int64_t eos, int64_t endoftext);

int64_t round_up(int64_t x, int64_t m);

// One tensor of a random checkpoint. The values depend only on (seed, canonical name), whatever
// the stored name or the thread count: norm weights 1, norm biases 0, everything else
// ~N(0, 0.02) (a four-uniform Irwin-Hall approximation of the normal).
struct TensorSpec {
  std::string canonical;  // keys the random stream
  std::string stored;     // the name written to the checkpoint
  Shape shape;
  bool norm = false;  // a LayerNorm / RMSNorm parameter
};

struct WeightOptions {
  uint64_t seed = 0;
  DType dtype = DType::kBF16;
  uint64_t max_shard_bytes = 2'000'000'000;
  ThreadPool* pool = nullptr;  // fills tensors in parallel (nullptr: serially)
  bool progress = false;       // progress lines on stderr
};

struct WrittenWeights {
  std::vector<std::string> files;  // model.safetensors, or the shards and their index
  size_t n_tensors = 0;
  int64_t n_params = 0;
  uint64_t n_bytes = 0;
};
WrittenWeights write_random_weights(const std::string& out_dir,
                                    const std::vector<TensorSpec>& tensors,
                                    const WeightOptions& opts);

// make-tiny-model's report: `files` (the metadata written) then the weight files, the counts,
// and the seconds since `seconds_from` (a steady_clock reading in seconds).
TinyModelResult report(std::vector<std::string> files, const WrittenWeights& weights,
                       int32_t tokenizer_size, int64_t vocab_size, double seconds_from);
// steady_clock now, in seconds (the start of a report's timing).
double clock_seconds();

}  // namespace mmrt::models::tiny
