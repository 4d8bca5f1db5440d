// Adapts the step token budget so the observed step time stays within the tightest TPOT target
// among running requests: as much prefill per step as that target allows, no more (throughput is
// traded for tail latency only as much as needed). Without a TPOT target: the maximum budget.
#pragma once

#include <cstdint>

#include "engine/cost_model.h"

namespace mmrt::engine {

struct BatchControllerConfig {
  int32_t min_budget = 16;  // always at least this many tokens (plus every decode)
  int32_t max_budget = 2048;
  double headroom = 0.8;  // aim for this fraction of the target
};

class BatchController {
 public:
  explicit BatchController(const BatchControllerConfig& cfg = {}) : cfg_(cfg) {}
  // Budget for the next step. target_ns: tightest TPOT among running requests (0: none).
  int32_t next_budget(const CostModel& cost, int64_t target_ns, int64_t n_decode,
                      double context_tokens);
  // Feedback from the step just run, of features `step` (corrects a biased cost model).
  void observe(double step_ns, int64_t target_ns, const StepFeatures& step = {});
  double correction() const { return scale_; }
  // Measured cost of a prefill token (0: none measured yet): a floor under the cost model's.
  double prefill_ns_per_token() const { return prefill_ns_; }

 private:
  BatchControllerConfig cfg_;
  double scale_ = 1.0;
  // Measured, not fitted: the recent decode-only step time, and what a step's prefill tokens
  // added to it. The cost model forgets its prefill coefficient over a long run of decode-only
  // steps (it is not excited there, and drifts with the collinear decode and context terms);
  // the first slice after such a run was sized by the drifted value: a 301-token slice took
  // 83 ms against a 40 ms goal. These two figures keep what the last prefill steps showed.
  double decode_step_ns_ = 0, prefill_ns_ = 0;
  double last_budget_ = 0;  // tokens, as next_budget() last gave it (with a TPOT target)
};

}  // namespace mmrt::engine
