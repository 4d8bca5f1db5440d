// Writes a complete random Qwen2-VL checkpoint folder in the exact Hugging Face layout
// (config.json, model.safetensors or shards + index, tokenizer.json, tokenizer_config.json,
// generation_config.json, preprocessor_config.json), for tests and benchmarks: no weights can be
// downloaded, so the same loading code that serves a real checkpoint is exercised on these.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/checkpoint.h"
#include "models/model.h"
#include "models/qwen2_vl/config.h"

namespace mmrt {
class ThreadPool;
}

namespace mmrt::models::qwen2_vl {

enum class TinySize {
  kTiny,     // a few MB: hidden 64, 2 layers; vision depth 2, embed 32 (unit tests)
  kSmall,    // ~90M parameters: hidden 768, 12 layers; vision depth 4, embed 384 (2-core bench)
  k2BShape,  // exactly Qwen2-VL-2B's dimensions (2.21B parameters, 4.4 GB in bf16)
};
// "tiny" | "small" | "2b-shape"; InvalidArgument otherwise.
TinySize parse_tiny_size(const std::string& s);
const char* tiny_size_name(TinySize s);

struct TinyOptions {
  TinySize size = TinySize::kTiny;
  uint64_t seed = 0;
  DType dtype = DType::kBF16;  // kBF16 or kF32
  // A tokenizer.json to copy in (its special-token ids go into config.json); empty: learn one
  // with the built-in byte-level BPE trainer.
  std::string tokenizer_path;
  Naming naming = Naming::kOld;
  std::optional<bool> tied;  // unset: untied lm_head for tiny, tied for small and 2b-shape
  uint64_t max_shard_bytes = 2'000'000'000;  // HF "2GB": the 2b-shape model becomes 3 shards
  ThreadPool* pool = nullptr;                // fills tensors in parallel (nullptr: serially)
  bool progress = false;                     // progress lines on stderr
  // A family built on Qwen2-VL's files (Qwen2.5-VL: the same tokenizer, chat template, processor
  // and text model): its preset (`size` is then ignored), and from the config with the
  // vocabulary and token ids filled in, its config.json (checked) and its tensors (canonical
  // names, lm_head omitted when tied). Unset: Qwen2-VL's.
  struct Family {
    Config base;
    std::function<std::string(const Config&)> config_json;
    std::function<std::vector<ExpectedTensor>(const Config&, bool tied)> tensors;
  };
  std::optional<Family> family;
};

struct TinyResult {
  Config config;                   // as written to config.json
  std::vector<std::string> files;  // every file written, relative to the output folder
  size_t n_tensors = 0;
  int64_t n_params = 0;
  uint64_t n_bytes = 0;        // tensor data bytes
  int32_t tokenizer_size = 0;  // max token id + 1
  double seconds = 0;          // wall time of the whole generation
};

// The preset's dimensions (token ids are filled in from the tokenizer later; a vocabulary of 0
// is the tokenizer's, rounded up).
Config tiny_base_config(TinySize size);

// Weights: seeded, reproducible for a given (seed, canonical tensor name) whatever the naming or
// thread count; norm weights 1, norm biases 0, everything else ~N(0, 0.02) (a four-uniform
// Irwin-Hall approximation of the normal).
TinyResult make_tiny_checkpoint(const std::string& out_dir, const TinyOptions& opts);

// Qwen2-VL's special tokens in id order: <|endoftext|>, <|im_start|>, <|im_end|>, ...,
// <|video_pad|> (14 tokens; the real checkpoint numbers them from 151643).
const std::vector<std::string>& special_tokens();

// make-tiny-model's entry (models/tiny_registry.h): the common options mapped to this family's.
TinyModelResult make_tiny_model(const std::string& out_dir, const TinyModelOptions& opts);
// The same for a family on these files (TinyOptions::family; `opts.size` names its preset in
// the summary), `name` in the summary and errors.
TinyModelResult make_tiny_model(const std::string& out_dir, const TinyModelOptions& opts,
                                std::optional<TinyOptions::Family> family, const char* name);

}  // namespace mmrt::models::qwen2_vl
