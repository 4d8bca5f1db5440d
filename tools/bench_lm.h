// A loaded model with a KV cache of its own, for the benchmarks that drive the runner directly
// (bench-model, bench-video): no engine, no scheduler, every step timed as it is.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "kernels/backend.h"
#include "kernels/kv_cache.h"
#include "models/model.h"

namespace mmrt::cli {

struct Lm {
  models::Model model;
  std::unique_ptr<kernels::KvCache> kv;
  Tensor forward(std::span<const models::SeqStep> batch) {
    return model.runner->forward(batch, *kv);
  }
  int32_t block_size() const { return kv->config().block_size; }
  size_t weight_bytes() const { return model.runner->weight_bytes(); }
  kernels::WeightFormat weight_format() const { return model.runner->weight_format(); }
};

// Loads `dir` with a KV cache of kvo.bytes (at least 64 MiB) in kvo.dtype, grown to at least
// `min_blocks` blocks when that is more (what the benchmark's sequences need).
Lm load_lm(const kernels::Backend& be, const std::string& dir, const models::LoadOptions& o,
           const engine::KvOptions& kvo, int64_t min_blocks = 0);

// Sequence `seq`'s block table for `tokens` tokens: sequences own consecutive, disjoint ranges of
// blocks, each as long as this one.
std::vector<int32_t> block_table(int seq, int64_t tokens, int32_t block_size);

}  // namespace mmrt::cli
