#include "engine/batch_controller.h"

#include <algorithm>
#include <cmath>

namespace mmrt::engine {

int32_t BatchController::next_budget(const CostModel& cost, int64_t target_ns, int64_t n_decode,
                                     double context_tokens) {
  const int64_t floor_budget = n_decode + cfg_.min_budget;
  if (target_ns <= 0) return std::max<int32_t>(cfg_.max_budget, static_cast<int32_t>(floor_budget));
  const double goal = static_cast<double>(target_ns) * cfg_.headroom * scale_;
  StepFeatures base{0, static_cast<double>(n_decode), 0, context_tokens};
  const double t0 = cost.predict_ns(base);
  StepFeatures one = base;
  one.prefill_tokens = 100;
  const double per_token = std::max(1.0, (cost.predict_ns(one) - t0) / 100.0);
  double prefill = (goal - t0) / per_token;
  int64_t budget = n_decode + static_cast<int64_t>(std::floor(std::max(0.0, prefill)));
  budget = std::clamp<int64_t>(budget, floor_budget, std::max<int64_t>(floor_budget, cfg_.max_budget));
  return static_cast<int32_t>(budget);
}

void BatchController::observe(double step_ns, int64_t target_ns) {
  if (target_ns <= 0) return;
  const double goal = static_cast<double>(target_ns) * cfg_.headroom;
  // Multiplicative correction: shrink by up to 15 % when a step is over the goal, grow 2 % when
  // under. With overshoots of 18 % or more, about one step in nine is over the goal (0.9 x the
  // TPOT target) in equilibrium, roughly the 89th percentile of step time (smaller overshoots
  // shrink less and are allowed more often), so a request's TPOT (its mean step time) stays
  // under the target. Shrinking by the full overshoot (down to half) tracked the slowest
  // steps instead, and on a shared host one slow step halved the budget for the next 35 steps.
  if (step_ns > goal)
    scale_ *= std::max(0.85, goal / step_ns);
  else
    scale_ = std::min(1.0, scale_ * 1.02);
  scale_ = std::clamp(scale_, 0.05, 1.0);
}

}  // namespace mmrt::engine
