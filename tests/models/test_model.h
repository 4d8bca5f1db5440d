// A checkpoint loaded through the registry, as the engine loads it, with a KV cache of its own:
// what the model tests drive directly (no scheduler).
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/kv_cache.h"
#include "models/model.h"
#include "models/registry.h"

namespace mmrt::test {

// The compute every model test runs on (all CPUs, the best kernel variant).
inline const kernels::Backend& test_backend() {
  static const kernels::CpuBackend b;
  return b;
}

struct TestModelOptions {
  std::optional<kernels::WeightFormat> weight_format;
  kernels::WeightPlacement weight_placement = kernels::WeightPlacement::kCopy;
  kernels::Int8Activations int8_activations = kernels::Int8Activations::kQ8;
  DType kv_dtype = DType::kBF16;
  int32_t kv_block_size = 16;
  int32_t kv_blocks = 256;
};

class TestModel {
 public:
  TestModel(const std::string& dir, const TestModelOptions& o)
      : model_(models::load_model(test_backend(), dir,
                                  {o.weight_format, o.weight_placement, o.int8_activations})) {
    kernels::KvCacheConfig kc = model_.runner->kv_config();
    kc.num_blocks = o.kv_blocks;
    kc.block_size = o.kv_block_size;
    kc.dtype = o.kv_dtype;
    kv_ = std::make_unique<kernels::KvCache>(test_backend(), kc);
  }
  Tensor forward(std::span<const models::SeqStep> batch) {
    return model_.runner->forward(batch, *kv_);
  }
  void capture_hidden_states(Tensor* out) { model_.runner->capture_hidden_states(out); }
  kernels::KvCache& kv_cache() { return *kv_; }
  const models::ModelSpec& spec() const { return model_.spec; }
  models::Runner& runner() { return *model_.runner; }
  const models::Processor& processor() const { return *model_.processor; }
  kernels::WeightFormat weight_format() const { return model_.runner->weight_format(); }

 private:
  models::Model model_;
  std::unique_ptr<kernels::KvCache> kv_;
};

inline std::unique_ptr<TestModel> load_test_model(const std::string& dir,
                                                  const TestModelOptions& o = {}) {
  return std::make_unique<TestModel>(dir, o);
}

// The last-token logits ([1, vocab], a copy) of `ids` prefilled in chunks of `chunk` tokens
// through `block_table`, so media runs split across steps: the prompt rows `rows` (increasing)
// take the rows of `embeds` ([rows.size(), hidden] f32) in order; `positions` ([position_rows,
// ids.size()], or empty for position = index) are sliced per chunk.
inline Tensor chunked_prefill(TestModel& lm, std::span<const int32_t> ids,
                              std::span<const int32_t> rows, const Tensor& embeds, int64_t chunk,
                              std::span<const int32_t> block_table,
                              std::span<const int32_t> positions = {}, int position_rows = 1) {
  const auto S = static_cast<int64_t>(ids.size());
  Tensor logits;
  for (int64_t done = 0; done < S;) {
    const int64_t n = std::min<int64_t>(chunk, S - done);
    std::vector<int32_t> pos, local;
    if (!positions.empty())
      for (int c = 0; c < position_rows; ++c)
        for (int64_t i = 0; i < n; ++i) pos.push_back(positions[size_t(c * S + done + i)]);
    int64_t first = -1;
    for (size_t j = 0; j < rows.size(); ++j)
      if (rows[j] >= done && rows[j] < done + n) {
        if (first < 0) first = static_cast<int64_t>(j);
        local.push_back(rows[j] - static_cast<int32_t>(done));
      }
    models::SeqStep s;
    s.tokens = ids.subspan(static_cast<size_t>(done), static_cast<size_t>(n));
    s.positions = pos;
    s.kv_before = static_cast<int32_t>(done);
    s.block_table = block_table;
    s.embed_rows = local;
    s.embeds = first >= 0 ? embeds.data<float>() + first * embeds.dim(1) : nullptr;
    s.want_logits = done + n == S;
    logits = lm.forward({&s, 1}).clone();
    done += n;
  }
  return logits;
}

}  // namespace mmrt::test
