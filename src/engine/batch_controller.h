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
  // Feedback from the step just run (corrects a biased cost model).
  void observe(double step_ns, int64_t target_ns);
  double correction() const { return scale_; }

 private:
  BatchControllerConfig cfg_;
  double scale_ = 1.0;
};

}  // namespace mmrt::engine
