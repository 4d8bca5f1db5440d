#include "bench_lm.h"

#include <algorithm>

namespace mmrt::cli {

std::unique_ptr<Lm> load_lm(const kernels::Backend& be, const std::string& dir,
                            const models::LoadOptions& o, const engine::KvOptions& kvo,
                            int64_t min_blocks) {
  engine::KvOptions k = kvo;
  if (k.blocks == 0) k.bytes = std::max<uint64_t>(k.bytes, 64ull << 20);
  // A benchmark's sessions are sized by --kv-mb and what it measures, never by a GPU's memory
  // fraction: two of them may be alive at once.
  k.device_fraction = 0;
  return models::Session::load(be, dir, o, k, min_blocks);
}

}  // namespace mmrt::cli
