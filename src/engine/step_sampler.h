// Draws a step's tokens where its logits are: the executor's last stage (engine/executor.h).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "engine/step.h"
#include "kernels/backend.h"
#include "kernels/sampling.h"

namespace mmrt::engine {

// Draws one token for each row of a step's logits, row i by specs[i], and gives the same tokens
// as sample_token on a host copy of each row. The work runs on the logits' device: the penalties
// edit the rows there (kernels::edit_logits), a greedy row comes back as its argmax and a top-k
// row (k <= kernels::kMaxDeviceTopK) as its k sorted candidates, which draw_candidate finishes on
// the host. A row drawn from its whole vocabulary (no top-k, or a larger one) comes to the host
// whole, and so does a row asking for log-probabilities (its raw logits, before the edits). On a
// GPU that is ~4 bytes per greedy row instead of the vocabulary's floats (608 KB for Qwen2).
class StepSampler {
 public:
  // logits: [n, vocab] f32, contiguous, memory of `be` (edited in place). tokens: n ids;
  // logprobs: n entries where a spec asks for them (else left empty).
  void sample(const kernels::Backend& be, Tensor& logits, std::span<const SampleSpec* const> specs,
              std::vector<int32_t>& tokens, std::vector<TokenLogprobs>& logprobs);

 private:
  std::vector<kernels::LogitEdit> edits_;
  std::vector<int32_t> greedy_rows_, greedy_ids_;
  std::vector<kernels::TopKRow> top_k_;
  std::vector<std::pair<float, int32_t>> candidates_, scratch_;
  std::vector<float> raw_, row_;
};

}  // namespace mmrt::engine
