// Adapts the step token budget so every running request keeps its TPOT target: as much prefill
// per step as the decoding requests' schedules allow, no more (throughput is traded for tail
// latency only as much as needed). Without a TPOT target: the maximum budget.
//
// A TPOT target bounds a request's mean time per output token (what a client measures: last
// token minus first over the tokens between), not each step. So a request's token n is due
// `mean_headroom` x n x target after its first token, and the next step may take until the
// earliest such due time among the decoding requests: a request that ran ahead (short steps, no
// prefill waiting) lends its slack to a longer, more efficient prefill step; one that fell behind
// gets shorter steps until it has caught up. A request still in its prefill has no schedule: it
// bounds the step at headroom x its target, or at half the time left to its first-token deadline
// where that is more (its own prompt's steps are not cut to its future token rate).
#pragma once

#include <cstdint>
#include <span>

#include "engine/cost_model.h"

namespace mmrt::engine {

struct BatchControllerConfig {
  int32_t min_budget = 16;  // always at least this many tokens (plus every decode)
  int32_t max_budget = 2048;
  double headroom = 0.8;       // a step's goal with no schedule yet: this fraction of the target
  double mean_headroom = 0.9;  // a request's tokens are due at this fraction of its target
  // A step's goal stays within [min_share, max_share] x the tightest target: a request far
  // behind does not stop prefill, and no step (no gap between two tokens of a stream) is longer
  // than the target, however far ahead the requests are.
  double min_share = 0.4, max_share = 1.0;
};

struct Request;

// What the running requests add to every step: how many decode, and the KV tokens they attend.
struct RunningLoad {
  int64_t n_decode = 0;
  double context = 0;
};
RunningLoad running_load(std::span<Request* const> running);

// How a step with a time goal paces an item whose encoder runs in parts (Scheduler::
// set_encoder_pacing before each schedule(); tokens_per_patch 0: whole items, within the patch
// budget).
struct EncoderPacing {
  // An encoder patch's cost in tokens of the step's budget (> 0: the parts are charged to it and
  // a step runs those that fit, at least one).
  double tokens_per_patch = 0;
  // A step's time without encoder work and a patch's (ns; 0: unknown). An item whose request has
  // a first-token deadline runs at least the parts a step that end its encoder within half the
  // time left, so that its prefill still has the other half.
  double step_ns = 0, patch_ns = 0;
  // The step's time goal (ns; 0: none). Its encoder parts take at most the time the goal leaves
  // beside the step's other work (one part when it leaves none), whatever the token budget's
  // floor would allow: the floor's tokens priced at a prefill token's cost are not time the
  // goal has (a noisy per-token cost made them the whole encoder).
  double goal_ns = 0;
};

// Time the next step may take (0: no running request has a TPOT target): the earliest due time
// of the decoding requests' next tokens, from `now`, within the config's bounds.
int64_t step_goal_ns(std::span<Request* const> running, int64_t now,
                     const BatchControllerConfig& cfg);
// The step time those schedules hold on average (mean_headroom x the tightest target of the
// decoding requests, or of the prompts where none that decodes has one; 0: none):
// what admission plans the queue's prefill with, not the next step's goal, which swings with
// who is ahead (a prediction made at one step's budget and checked at the next's would flip).
int64_t steady_goal_ns(std::span<Request* const> running, const BatchControllerConfig& cfg);

class BatchController {
 public:
  explicit BatchController(const BatchControllerConfig& cfg = {})
      : cfg_(cfg), planning_(cfg.max_budget) {}
  // Budget for the next step. goal_ns: the time it may take (step_goal_ns; 0: no limit).
  int32_t next_budget(const CostModel& cost, int64_t goal_ns, int64_t n_decode,
                      double context_tokens);
  // The same budget for a goal, without being the next step's (admission's planning budget).
  int32_t budget_for(const CostModel& cost, int64_t goal_ns, int64_t n_decode,
                     double context_tokens) const;
  // Feedback from the step just run, of features `step`, against the goal it was given
  // (corrects a biased cost model).
  void observe(double step_ns, int64_t goal_ns, const StepFeatures& step = {});
  const BatchControllerConfig& config() const { return cfg_; }
  // The engine's call before each step: the budget for the step's goal (step_goal_ns of
  // `running` at `now`, kept as goal_ns()), and the planning budget for steady_goal_ns (kept as
  // planning_budget()).
  int32_t plan_step(const CostModel& cost, std::span<Request* const> running, int64_t now,
                    int64_t n_decode, double context_tokens);
  int64_t goal_ns() const { return goal_ns_; }
  // The planned step's pacing of encoder parts, by the cost model: a patch in prefill tokens of
  // its budget (0 when the step has no time goal or the model no encoder cost), the step's time
  // with these decode rows and no encoder work, a patch's time.
  EncoderPacing encoder_pacing(const CostModel& cost, int64_t n_decode,
                               double context_tokens) const;
  int32_t planning_budget() const { return planning_; }
  // The planning budget were a request with this TPOT target decoding among `running` (one more
  // decode row): planning_budget() where their targets are as tight already, or for a target of
  // 0.
  int32_t planning_budget_with(const CostModel& cost, std::span<Request* const> running,
                               int64_t tpot_target_ns) const;
  double correction() const { return scale_; }
  // Measured cost of a prefill token (0: none measured yet): a floor under the cost model's.
  double prefill_ns_per_token() const { return prefill_ns_; }

 private:
  // A prefill token's time in a step with these decode rows (a floor: the measured one).
  double prefill_token_ns(const CostModel& cost, int64_t n_decode, double context_tokens) const;
  BatchControllerConfig cfg_;
  double scale_ = 1.0;
  // Measured, not fitted: the recent decode-only step time, and what a step's prefill tokens
  // added to it. The cost model forgets its prefill coefficient over a long run of decode-only
  // steps (it is not excited there, and drifts with the collinear decode and context terms);
  // the first slice after such a run was sized by the drifted value: a 301-token slice took
  // 83 ms against a 40 ms goal. These two figures keep what the last prefill steps showed.
  double decode_step_ns_ = 0, prefill_ns_ = 0;
  double last_budget_ = 0;  // tokens, as next_budget() last gave it (with a TPOT target)
  int64_t goal_ns_ = 0;     // plan_step's last goal
  int32_t planning_ = 0;    // plan_step's last planning budget
};

}  // namespace mmrt::engine
