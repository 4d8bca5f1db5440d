// A checkpoint loaded through the registry, as the engine loads it, with a KV cache of its own:
// what the model tests drive directly (no scheduler).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "kernels/backend.h"
#include "kernels/kv_cache.h"
#include "models/model.h"
#include "models/registry.h"

namespace mmrt::test {

// The compute every model test runs on (all CPUs, the best kernel variant).
inline const kernels::Backend& test_backend() {
  static const kernels::Backend b;
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
    kv_ = std::make_unique<kernels::KvCache>(kc);
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

}  // namespace mmrt::test
