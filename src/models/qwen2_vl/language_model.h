// The Qwen2-VL language model (Qwen2 decoder with M-RoPE) on the CPU kernels: loaded from a
// Hugging Face checkpoint folder, run one step at a time over a batch of sequences that may mix
// prefill chunks and decode tokens, over a paged KV cache the model owns (the engine's manager
// decides which blocks each sequence uses).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/tensor.h"
#include "io/hf_config.h"
#include "kernels/kv_cache.h"
#include "kernels/linear.h"

namespace mmrt::models {

struct LanguageModelOptions {
  // Weight storage for the linear layers: unset = the checkpoint's own precision (f32 stays
  // f32, bf16/f16 become bf16); kInt8 quantises per output channel at load time.
  std::optional<kernels::WeightFormat> weight_format;
  // kCopy (default) gives the weights their own huge-page memory (fastest decode);
  // kViewIfPossible reads bf16/f32 weights straight from the mapped checkpoint (faster load,
  // no second copy in memory).
  kernels::WeightPlacement weight_placement = kernels::WeightPlacement::kCopy;
  // int8 weights in decode steps (<= gemv_max_rows tokens): kQ8 multiplies x quantised per block
  // of 64 with integer dot products (fastest; where the CPU has AVX512-VNNI), kFloat keeps the
  // layers strictly weight-only. See kernels::Int8Activations.
  kernels::Int8Activations int8_activations = kernels::Int8Activations::kQ8;
  DType kv_dtype = DType::kBF16;  // kF32 for exactness tests
  int32_t kv_block_size = 16;
  int32_t kv_blocks = 0;             // 0: derived from kv_bytes
  uint64_t kv_bytes = 256ull << 20;  // KV cache budget when kv_blocks == 0
};

// One sequence's part of a step: its new tokens (a prefill chunk or one decode token).
struct SeqStep {
  std::span<const int32_t> tokens;  // [n]
  // M-RoPE positions [3, n] (t row, then h row, then w row). Empty: text positions
  // kv_before + i + rope_delta on all three rows.
  std::span<const int32_t> positions;
  int32_t rope_delta = 0;
  int32_t kv_before = 0;                 // tokens of this sequence already in the cache
  std::span<const int32_t> block_table;  // physical blocks covering kv_before + n tokens
  // Media embeddings replacing the token embeddings of some rows (image pads): rows are indices
  // into `tokens`, embeds is [rows.size(), hidden] f32.
  std::span<const int32_t> embed_rows;
  const float* embeds = nullptr;
  bool want_logits = true;  // logits of this sequence's last new token
};

class LanguageModel {
 public:
  // Reads config.json and the safetensors in `dir`, checks every tensor (missing, wrong shape,
  // unsupported dtype, config/weights mismatch) before any compute, packs the weights.
  // Kernels run on `be`, which must outlive the model.
  static std::unique_ptr<LanguageModel> load(const kernels::Backend& be, const std::string& dir,
                                             const LanguageModelOptions& opts = {});
  ~LanguageModel();

  const io::Qwen2VLConfig& config() const;
  const kernels::KvCache& kv_cache() const;
  kernels::KvCache& kv_cache();
  kernels::WeightFormat weight_format() const;
  size_t weight_bytes() const;  // bytes the linear layers stream per decode step

  // Runs every sequence's new tokens through the decoder, writing their K/V into the cache.
  // Returns logits [n_want, vocab] f32 for the sequences with want_logits, in batch order
  // (a view of an internal buffer, valid until the next call). Throws InvalidArgument on
  // inconsistent inputs (block table too short, position count wrong, token id out of range).
  Tensor forward(std::span<const SeqStep> batch);

  // Debug aid: when set, forward() copies the hidden state after the embeddings and after every
  // layer ([n_layers + 1, n_tokens, hidden]) here, to name the first layer that diverges.
  void capture_hidden_states(Tensor* out) { capture_ = out; }

  // Embeds token ids ([n] -> [n, hidden] f32), as the first step of forward() does.
  void embed(std::span<const int32_t> ids, float* out) const;

 private:
  struct Impl;
  explicit LanguageModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  Tensor* capture_ = nullptr;
};

}  // namespace mmrt::models
