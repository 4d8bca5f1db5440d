// The CPU's sampling kernels (kernels/sampling.h; the dispatchers checked the arguments). Rows are
// few (one per sequence drawing a token) and each is one pass over the vocabulary, so they run on
// the calling thread.
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"
#include "kernels/sampling.h"

namespace mmrt::kernels::cpu {

void edit_logits(const CpuBackend&, float* x, int64_t stride, std::span<const LogitEdit> edits) {
  for (const LogitEdit& e : edits) {
    float& l = x[e.row * stride + e.token];
    l = edit_logit(l, e);
  }
}

void argmax_rows(const CpuBackend&, const float* x, int64_t stride, int64_t vocab,
                 std::span<const int32_t> rows, int32_t* out) {
  for (size_t i = 0; i < rows.size(); ++i)
    out[i] = static_cast<int32_t>(argmax(x + rows[i] * stride, vocab));
}

void top_k_rows(const CpuBackend&, const float* x, int64_t stride, int64_t vocab,
                std::span<const TopKRow> rows, std::pair<float, int32_t>* out) {
  std::vector<std::pair<float, int32_t>> c(static_cast<size_t>(vocab));
  auto desc = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  for (const TopKRow& r : rows) {
    const float* xr = x + r.row * stride;
    for (int64_t i = 0; i < vocab; ++i)
      c[static_cast<size_t>(i)] = {xr[i] / r.temperature, static_cast<int32_t>(i)};
    std::partial_sort(c.begin(), c.begin() + r.k, c.end(), desc);
    out = std::copy(c.begin(), c.begin() + r.k, out);
  }
}

}  // namespace mmrt::kernels::cpu
