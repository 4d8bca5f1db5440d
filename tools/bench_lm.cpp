#include "bench_lm.h"

#include <algorithm>

#include "core/error.h"
#include "models/registry.h"

namespace mmrt::cli {

std::vector<int32_t> block_table(int seq, int64_t tokens, int32_t block_size) {
  std::vector<int32_t> b;
  const int64_t nb = (tokens + block_size - 1) / block_size;
  for (int64_t i = 0; i < nb; ++i) b.push_back(static_cast<int32_t>(seq * nb + i));
  return b;
}

Lm load_lm(const kernels::Backend& be, const std::string& dir, const models::LoadOptions& o,
           const engine::KvOptions& kvo, int64_t min_blocks) {
  Lm lm{models::load_model(be, dir, o), nullptr};
  kernels::KvCacheConfig kc = lm.model.runner->kv_config();
  kc.block_size = kvo.block_size;
  kc.dtype = kvo.dtype;
  const uint64_t bytes = std::max<uint64_t>(kvo.bytes, 64ull << 20);
  const uint64_t per_block = kernels::kv_bytes_per_block(kc);
  const uint64_t blocks = std::max<uint64_t>(
      {1, bytes / per_block, static_cast<uint64_t>(std::max<int64_t>(min_blocks, 0))});
  if (blocks > uint64_t(INT32_MAX))
    throw InvalidArgument("the benchmark's KV cache would need " + std::to_string(blocks) +
                          " blocks: lower --prompt or --steps");
  kc.num_blocks = static_cast<int32_t>(blocks);
  lm.kv = std::make_unique<kernels::KvCache>(be, kc);
  return lm;
}

}  // namespace mmrt::cli
