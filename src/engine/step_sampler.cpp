#include "engine/step_sampler.h"

#include <algorithm>

#include "core/error.h"

namespace mmrt::engine {

void StepSampler::sample(const kernels::Backend& be, Tensor& logits,
                         std::span<const SampleSpec* const> specs, std::vector<int32_t>& tokens,
                         std::vector<TokenLogprobs>& logprobs) {
  tokens.clear();
  logprobs.clear();
  if (specs.empty()) return;
  if (logits.rank() != 2 || logits.dtype() != DType::kF32 || !logits.is_contiguous() ||
      logits.dim(0) != static_cast<int64_t>(specs.size()))
    throw InternalError("step sampler: expected " + std::to_string(specs.size()) +
                        " contiguous f32 rows of logits, got " + logits.describe());
  const int64_t n = logits.dim(0), V = logits.dim(1);
  float* x = logits.data<float>();
  const bool host = logits.on_host();
  const size_t row_bytes = static_cast<size_t>(V) * sizeof(float);
  tokens.assign(static_cast<size_t>(n), 0);

  // Raw rows for log-probabilities, before any edit.
  const auto wants_logprobs = [](const SampleSpec* s) { return s->logprobs >= 0; };
  const size_t n_raw =
      static_cast<size_t>(std::count_if(specs.begin(), specs.end(), wants_logprobs));
  raw_.resize(n_raw * static_cast<size_t>(V));
  for (size_t i = 0, r = 0; i < specs.size(); ++i)
    if (wants_logprobs(specs[i]))
      be.copy_to_host(raw_.data() + (r++) * static_cast<size_t>(V), x + i * V, row_bytes);

  edits_.clear();
  for (size_t i = 0; i < specs.size(); ++i)
    penalty_edits(specs[i]->settings, static_cast<int32_t>(i), V, specs[i]->prompt,
                  specs[i]->output, edits_);
  kernels::edit_logits(be, x, n, V, V, edits_);

  greedy_rows_.clear();
  top_k_.clear();
  const int64_t k_max = std::min<int64_t>(V, kernels::kMaxDeviceTopK);
  for (size_t i = 0; i < specs.size(); ++i) {
    const SamplerSettings& s = specs[i]->settings;
    const auto row = static_cast<int32_t>(i);
    if (s.temperature == 0.0f) {
      greedy_rows_.push_back(row);
    } else if (s.top_k > 0 && s.top_k <= k_max) {
      top_k_.push_back({.row = row, .k = s.top_k, .temperature = s.temperature});
    } else {  // the whole vocabulary: the row comes to the host
      std::span<const float> r(x + i * V, static_cast<size_t>(V));
      if (!host) {
        row_.resize(static_cast<size_t>(V));
        be.copy_to_host(row_.data(), x + i * V, row_bytes);
        r = row_;
      }
      tokens[i] = sample_edited(r, s, specs[i]->draw, scratch_);
    }
  }
  greedy_ids_.resize(greedy_rows_.size());
  kernels::argmax_rows(be, x, n, V, V, greedy_rows_, greedy_ids_.data());
  for (size_t j = 0; j < greedy_rows_.size(); ++j)
    tokens[static_cast<size_t>(greedy_rows_[j])] = greedy_ids_[j];
  size_t total = 0;
  for (const kernels::TopKRow& r : top_k_) total += static_cast<size_t>(r.k);
  candidates_.resize(total);
  kernels::top_k_rows(be, x, n, V, V, top_k_, candidates_.data());
  size_t off = 0;
  for (const kernels::TopKRow& r : top_k_) {
    const SampleSpec& sp = *specs[static_cast<size_t>(r.row)];
    tokens[static_cast<size_t>(r.row)] = draw_candidate(
        std::span(candidates_).subspan(off, static_cast<size_t>(r.k)), sp.settings, sp.draw);
    off += static_cast<size_t>(r.k);
  }

  if (n_raw == 0) return;
  logprobs.resize(static_cast<size_t>(n));
  for (size_t i = 0, r = 0; i < specs.size(); ++i)
    if (wants_logprobs(specs[i]))
      logprobs[i] =
          token_logprobs(std::span<const float>(raw_.data() + (r++) * static_cast<size_t>(V),
                                                static_cast<size_t>(V)),
                         tokens[i], specs[i]->logprobs);
}

}  // namespace mmrt::engine
