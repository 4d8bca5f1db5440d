// The CPU's sampling kernels (kernels/sampling.h; the dispatchers checked the arguments). Rows are
// few (one per sequence drawing a token) and each is one pass over the vocabulary, so they run on
// the calling thread.
#include <algorithm>

#include "kernels/cpu/cpu_backend.h"
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

void top_k_rows(const CpuBackend& be, const float* x, int64_t stride, int64_t vocab,
                std::span<const TopKRow> rows, std::pair<float, int32_t>* out) {
  // The candidates in the backend's scratch: no vocabulary-sized allocation per step.
  struct Candidate {
    float value;
    int32_t id;
  };
  auto* c = static_cast<Candidate*>(be.scratch(0, static_cast<size_t>(vocab) * sizeof(Candidate)));
  auto desc = [](const Candidate& a, const Candidate& b) {
    return a.value > b.value || (a.value == b.value && a.id < b.id);
  };
  for (const TopKRow& r : rows) {
    const float* xr = x + r.row * stride;
    for (int64_t i = 0; i < vocab; ++i) c[i] = {xr[i] / r.temperature, static_cast<int32_t>(i)};
    std::partial_sort(c, c + r.k, c + vocab, desc);
    for (int32_t j = 0; j < r.k; ++j) *out++ = {c[j].value, c[j].id};
  }
}

}  // namespace mmrt::kernels::cpu
