// One way to run a loaded model outside the scheduler (benchmarks, tests, tools): the model, a
// KV cache from the backend it computes on (sized by kv_cache_config, the one sizing rule the
// engine's executor uses too), sequences owning disjoint ranges of blocks, chunked prefill with
// media rows, decode and teacher forcing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/kv_cache.h"
#include "models/model.h"

namespace mmrt::models {

// How the KV cache memory is laid out (the model gives layers, heads and head_dim).
struct KvOptions {
  DType dtype = DType::kBF16;     // kF32 for exactness tests
  int32_t block_size = 16;        // tokens per block, a multiple of 16
  int32_t blocks = 0;             // 0: as many as the budget holds
  uint64_t bytes = 256ull << 20;  // the budget when blocks == 0 (on a device: see below)
  // On a device backend (not the CPU), when > 0 and blocks == 0: the budget is what keeps the
  // device's memory in use at or under this fraction of its total, counting everything already
  // allocated there (the weights) at the time the cache is made; `bytes` is ignored. The rest
  // (1 - fraction) is the step's activations' and the encoders' room.
  double device_fraction = 0;
};

// The KV cache `runner` needs under `o` on `be` (at least one block; InvalidArgument past
// INT32_MAX; ResourceExhausted when a device's fraction leaves no room for one block, naming
// the memory in use and the fraction).
kernels::KvCacheConfig kv_cache_config(const kernels::Backend& be, const Runner& runner,
                                       const KvOptions& o);

// A prompt for Session::prefill. Prompt rows `media_rows` (strictly increasing) take the rows of
// `media` ([media_rows.size(), hidden] f32, the backend's memory) in order.
struct Prompt {
  std::span<const int32_t> ids;        // [S]
  std::span<const int32_t> positions;  // [position_rows, S], or empty: position = index
  int position_rows = 1;
  std::span<const int32_t> media_rows;
  const Tensor* media = nullptr;
};

class Session {
 public:
  // `model`, loaded on `be` (which must outlive the session), with a KV cache of `kv`, grown to
  // at least `min_blocks` blocks.
  Session(const kernels::Backend& be, Model model, const KvOptions& kv, int64_t min_blocks = 0);
  // The same for the checkpoint in `dir` (models::load_model).
  static std::unique_ptr<Session> load(const kernels::Backend& be, const std::string& dir,
                                       const LoadOptions& lo, const KvOptions& kv,
                                       int64_t min_blocks = 0);

  Model& model() { return model_; }
  const Model& model() const { return model_; }
  const ModelSpec& spec() const { return model_.spec; }
  Runner& runner() { return *model_.runner; }
  const Processor& processor() const { return *model_.processor; }
  kernels::KvCache& kv() { return *kv_; }
  const kernels::Backend& backend() const { return be_; }
  int32_t block_size() const { return kv_->config().block_size; }
  int64_t kv_tokens() const { return kv_->num_slots(); }
  size_t weight_bytes() const { return model_.runner->weight_bytes(); }
  kernels::WeightFormat weight_format() const { return model_.runner->weight_format(); }

  // Sequence `seq`'s block table for `tokens` tokens: sequences own consecutive, disjoint ranges
  // of blocks, each as long as this one. ResourceExhausted past the cache.
  std::vector<int32_t> block_table(int seq, int64_t tokens) const;

  // One decoder step (Runner::forward): logits [n_want, vocab] in the backend's memory, valid
  // until the next call.
  Tensor forward(std::span<const SeqStep> batch);
  // `p` through the decoder in chunks of `chunk` tokens from the start of the sequence whose
  // blocks are `block_table` (a media run may split across chunks): the last token's logits
  // [1, vocab], a host copy.
  Tensor prefill(const Prompt& p, int64_t chunk, std::span<const int32_t> block_table);
  // One decode step: `token` at cache index `kv_before` (position kv_before + rope_delta): its
  // logits [1, vocab], a host copy.
  Tensor decode(int32_t token, int64_t kv_before, int32_t rope_delta,
                std::span<const int32_t> block_table);

 private:
  const kernels::Backend& be_;
  Model model_;
  std::unique_ptr<kernels::KvCache> kv_;
};

}  // namespace mmrt::models
