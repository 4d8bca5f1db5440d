// Admission control: predicts a request's time to first token from the cost model and the work
// the policy serves before it, and applies its SLA class's rule (refuse, downgrade, accept) when
// the prediction misses the promise: at arrival (admit), and again while it waits (expire_late:
// a request past saving is refused or downgraded instead of served late). A per-class bias,
// learned from the first tokens of admitted requests, corrects the queue model.
//
// It reads the engine's state through a read-only view, so it is unit-tested with a view of
// its own (no scheduler, no model).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/batch_controller.h"
#include "engine/cost_model.h"
#include "engine/policy.h"
#include "engine/request.h"
#include "engine/sla.h"

namespace mmrt::engine {

// What admission reads of the engine (the step loop's books).
class SchedulerView {
 public:
  virtual ~SchedulerView() = default;
  virtual std::span<Request* const> running() const = 0;
  // Waiting for the scheduler, and admitted ones still in media preprocessing (queued ahead
  // of a later arrival as much as the scheduler's waiting requests are).
  virtual std::span<Request* const> waiting() const = 0;
  // The step budget to plan the queue's prefill with (the engine's steady one).
  virtual int32_t token_budget() const = 0;
  // That budget were a request with this TPOT target decoding beside the running ones: smaller
  // where its target tightens the steps the running requests' targets allow (a gold request's
  // 100 ms cut the overloaded engine's steps from ~155 to ~130 ms and its prefill by a sixth).
  // A target of 0, and the default (no batch controller): token_budget().
  virtual int32_t token_budget_with(int64_t tpot_target_ns) const {
    (void)tpot_target_ns;
    return token_budget();
  }
  virtual const Policy& policy() const = 0;
  // Prompt tokens the prefix cache would give r now.
  virtual int64_t cached_prefix_tokens(const Request& r) const = 0;
  virtual bool encoder_cached(const Hash128& key) const = 0;
};

struct AdmissionStats {
  int64_t refused = 0, downgraded = 0;
  // Of those, decided after admission (the prediction at arrival was wrong).
  int64_t refused_late = 0, downgraded_late = 0;
  // Of refused_late: requests whose encoder had already run (work spent for nothing).
  int64_t refused_after_encode = 0;
  // Of refused and downgraded: decided at arrival because admitting the request in its class
  // would have made an admitted request late.
  int64_t displacing = 0;
  // Of refused and downgraded: decided for a time per output token the decode step would miss.
  int64_t tpot_misses = 0;
};

// What admission would predict now, per class, for a request that has not arrived (a cluster
// router predicts with it before it picks a worker, cluster/ttft_quote.h): the first token of a
// request with no work of its own (the queue the policy serves before it, the step in flight,
// the class's bias), and the price of a request's own work at the present load.
struct Quote {
  struct Class {
    std::string name;
    double ahead_ms = 0;  // predicted TTFT of a request of no work of its own, margin included
    double bias = 1;      // the class's learned bias (ttft_bias), which scales own work too
    // Of ahead_ms, what does not drain as the queue does: an empty step and the margin at the
    // present load.
    double floor_ms = 0;
    // The longest text prompt (no media, nothing cached) whose own work alone, as admission
    // judges it (no queue, no decodes, the present step budget, the class's bias), fits the
    // class's time to first token: a longer one is refused as one this server cannot serve in
    // that class, whatever the load. Capped at kMaxQuotedPrompt.
    int64_t prompt_tokens_alone = 0;
  };
  static constexpr int64_t kMaxQuotedPrompt = int64_t{1} << 24;
  std::vector<Class> classes;  // those with a TTFT promise, most important first
  // Own work, before the bias: a prompt token (a full step's time over its prefill tokens), an
  // encoder patch and a media item's fixed encoder cost.
  double token_ns = 0, patch_ns = 0, item_ns = 0;
  // A prompt token on an idle engine (no decodes sharing the steps): what "its own work alone
  // is over the promise" (no retry helps) is judged with, as admission judges it.
  double token_idle_ns = 0;
  // A query-key pair of a prompt's own attention (CostModel::pair_ns: a long prompt's chunks
  // attend to everything before them), before the bias.
  double pair_ns = 0;
};

class Admission {
 public:
  // `cost` is the engine's calibrated model (read here, fitted by the step loop). `reserve`:
  // lighter classes are admitted only with room for the recent inflow of heavier ones (which
  // slo serves first): more platinum served above capacity, fewer requests in all
  // (docs/sla.md, "The inflow reservation").
  // `safety`: learn the per-class safety (safety()); without it the factor stays 1.
  Admission(const SlaConfig& sla, const CostModel& cost, bool reserve = false, bool safety = false);

  // Decides r arriving now (r.deadline_ns == 0: always admitted). May downgrade r. Returns
  // false with the reason to refuse. Sets r.predicted_ttft_ns / r.model_ttft_ns.
  // Promises kept: r is admitted in its class only if its own prediction fits and it would not
  // make a request admitted before it, and served after it, miss a deadline it meets now; a
  // request that would is treated as a miss of its own (its class's rule: refuse, downgrade and
  // decide again in the lower class, or accept).
  bool admit(Request& r, const SchedulerView& v, int64_t now, std::string& why);
  // Before a request's media is fetched or its prompt tokenised: false with the reason when
  // even a request of no work of its own would miss r's promise behind the queue, and its
  // class refuses a miss. Records nothing (r is a shell that never enters the engine).
  bool precheck(Request& r, const SchedulerView& v, int64_t now, std::string& why);

  // What a request of each class arriving now would be quoted (see Quote).
  Quote quote(const SchedulerView& v, int64_t now);

  // Requests without a first token whose first token can no longer come by their deadline,
  // even if their remaining work ran from now on: downgraded in place where their class says
  // so; the ones to refuse are returned with the reason. Requests whose media is still being
  // preprocessed are left alone (the media stage holds them).
  struct Refusal {
    Request* r;
    std::string reason;
  };
  // A request queued after `since_ns` (the last check) and before `now` was admitted off the
  // step loop against the books of the step that just ended: that decision stands until the
  // next check.
  std::vector<Refusal> expire_late(const SchedulerView& v, int64_t now, int64_t since_ns = 0);

  // A step ran: a decode-only one (no prefill, no encoder) is what a token of a request
  // admitted now takes at least (the time per output token checks).
  void observe_step(const StepFeatures& f, double step_ns);

  // The first token of an admitted request came: learns its class's bias.
  void observe_first_token(const Request& r, int64_t first_token_ns);
  // The class bias for a weight: the least-squares slope of actual on modelled TTFT over the
  // last kBiasWindow first tokens (and late decisions, at the least their first token would
  // have taken), clamped to 0.25-4x; 1 before 8 samples.
  double ttft_bias(double weight) const;
  // The class's safety factor (>= 1) on the queue's share of a prediction (the work of the
  // requests served before, whose errors add up the longer it is), at admission only: the bias
  // makes the prediction right on average, so a request admitted with nothing to spare is late
  // about half the time (refused late by expire_late after waiting most of its budget: 3-5 % of the
  // admitted requests in the promise sweep, after 0.15 s for platinum and 4.7 s for silver). A
  // quantile tracker keeps those near kLateTarget of the class's admissions: each request
  // refused or moved down late, or served late, raises it by kSafetyStep; each first token in
  // time lowers it by kSafetyStep * kLateTarget / (1 - kLateTarget); it stays within
  // [1, kMaxSafety]. The late check itself judges without it (a request is refused late only
  // when it is most likely late).
  double safety(double weight) const;

  const AdmissionStats& stats() const { return stats_; }

  static constexpr size_t kBiasWindow = 64;
  static constexpr double kLateTarget = 0.01, kSafetyStep = 0.05, kMaxSafety = 1.5;
  static constexpr int64_t kTpotObservations = 8;
  static constexpr int64_t kInflowWindowNs = 5'000'000'000;

 private:
  // Encoder work of a request's media not yet computed nor cached: patches and items.
  struct MediaWork {
    double patches = 0, items = 0;
    MediaWork& operator+=(const MediaWork& o) {
      patches += o.patches;
      items += o.items;
      return *this;
    }
  };
  struct Prediction {
    double own = 0;  // r's prompt tokens still to compute
    MediaWork own_media;
    double queued = 0;  // prompt tokens served before r
    // The attention pairs of r's remaining prompt, and of r's and those served before it.
    double own_pairs = 0, pairs = 0;
    double rho = 0;         // the reserved share of the engine (reserve only)
    int64_t guard_ns = 0;   // the decision's margin: the step in flight (step_guard_ns)
    int64_t safety_ns = 0;  // ... and the class's safety on the queue ahead of r (safety())
    int64_t margin_ns() const { return guard_ns + safety_ns; }
    RunningLoad load;  // the running requests' load
    // The step budget r's prompt runs at: the batch controller's, or smaller where a prompt
    // served before r has a tighter TPOT target (it decodes while r waits); and once r decodes
    // too (its own target), what the requests served after it run at.
    int64_t budget = 0, budget_with_r = 0;
  };
  // Sets r.model_ttft_ns and r.predicted_ttft_ns from the queue ahead of r.
  Prediction predict(Request& r, const SchedulerView& v, int64_t now);
  std::string miss_reason(const Request& r, const Prediction& p) const;
  // The share of the engine's time the work of heavier classes admitted in the last
  // kInflowWindowNs takes (their marginal prefill and encoder cost).
  double inflow_share(const Request& r, int64_t now);
  // Adds a sample of actual (from arrival) / modelled TTFT to r's class bias.
  void learn(const Request& r, double actual_ns);
  // A request of this class weight admitted in time was late (or was not).
  void track_lateness(double weight, bool late);
  // What q's class safety adds to a prediction of `work` for q (biased as the prediction is):
  // its share past q's own prompt and media (`own` tokens, `media`, `own_pairs`) predicted alone
  // at the same load and budget. 0 without a learned safety (the default), at no cost.
  double safety_ns(const Request& q, double work, double own, const MediaWork& media,
                   double own_pairs, const RunningLoad& load, int64_t budget) const;
  // A request admitted earlier that r, served before it, would make miss its deadline (it meets
  // it without r): r's work goes first, and the steps after it run at the budget r's TPOT target
  // leaves (p.budget_with_r). The first such in the policy's order, or nullptr. `late_by_ns` is
  // set to how far past its deadline its first token would come.
  const Request* displaced_by(const Request& r, const Prediction& p, const SchedulerView& v,
                              int64_t now, int64_t& late_by_ns) const;
  // The class's rule for r missing its deadline by a prediction of `ttft_ns` (refuse for a
  // deadline of its own; `tpot`: for a TPOT of its own, when its TPOT is what is missed).
  SlaConfig::MissAction on_miss(const Request& r, int64_t ttft_ns, bool tpot = false) const;
  // r's time per output token: the decode step of the running requests and r, which no budget
  // makes shorter (the batch controller only holds prefill back). A miss when it is over r's
  // TPOT target, or over a running request's that the step without r meets (r would make it
  // late). Not judged before kTpotObservations decode-only steps were measured: the joint fit
  // extrapolates a decode-only step badly from prefill steps (a tiny model's 1 ms step was
  // predicted at 100-350 ms after a few image requests).
  struct TpotMiss {
    double step_ns = 0;               // the predicted decode step with r (0: no miss)
    int64_t target_ns = 0;            // the target it is over
    const Request* victim = nullptr;  // whose target it is, when not r's
    int64_t retry_after_ns = -1;      // when enough decoders have finished (-1: never)
  };
  TpotMiss tpot_miss(const Request& r, const SchedulerView& v) const;
  // A decode step of n sequences: measured (observe_step), not fitted.
  double decode_step_ns(double n_decode) const;
  // Moves r to class `to` (its promise, weight and deadline from arrival).
  void downgrade(Request& r, int to);
  MediaWork uncached_media(const Request& q, const SchedulerView& v) const;
  // The model's time to the first token of a request with `own` prompt tokens and `media` of
  // its own behind `queued` tokens and `queued_media`, at `load` and `budget` (no bias, no
  // margin, no media preprocessing): the one formula every check predicts with.
  // `pairs`: the attention pairs of all that prompt work (own_pairs of each request).
  double work_ns(double own, const MediaWork& media, double queued, const MediaWork& queued_media,
                 const RunningLoad& load, int64_t budget, double pairs) const;
  // q's own prompt and media alone (nothing queued ahead) at `load` and `budget`, with its
  // media still to preprocess: unbiased, without margin.
  double alone_ns(const Request& q, double own, const MediaWork& media, double own_pairs,
                  const RunningLoad& load, int64_t budget) const;
  double own_tokens(const Request& r, const SchedulerView& v) const;
  // Quote::Class::prompt_tokens_alone for a class's TTFT and bias at this step budget.
  int64_t longest_alone(int64_t ttft_ns, double bias, int64_t budget) const;
  // The margin both admission and the late check add: the step that may be in flight when a
  // request arrives or is checked, at the running load. Where other requests have prompt work
  // left, a full step of the budget (a scheduled prompt shares steps with them); else one decode
  // step of the running requests, on an idle engine next to nothing. (One full step everywhere
  // refused a lone image request on an idle 2b-shape server in bf16: a 512-token step there is
  // 1.8 s, and 3.3 s of predicted work + 1.8 s was over silver's 5 s.)
  double step_guard_ns(const RunningLoad& load, int64_t budget, bool others_prefill) const;
  // Requests with prompt work left (waiting, or running and not yet prefilled), r excluded.
  static int64_t prompts_besides(const Request* r, const SchedulerView& v);

  const SlaConfig& sla_;
  const CostModel& cost_;
  const bool reserve_;
  const bool learn_safety_;
  struct Admitted {
    int64_t t_ns;
    double weight, tokens, patches, items;
  };
  std::deque<Admitted> recent_;  // reserve: admissions of the last kInflowWindowNs
  int64_t first_admit_ns_ = -1;
  // Per class weight: (modelled, actual) TTFT of its last kBiasWindow first tokens.
  std::map<double, std::deque<std::pair<double, double>>> bias_samples_;
  std::map<double, double> safety_;  // per class weight, absent: 1
  AdmissionStats stats_;
  // The last kDecodeSteps decode-only steps (rows, ns), a ring, and how many were seen.
  static constexpr int64_t kDecodeSteps = 16;
  std::array<std::pair<double, double>, kDecodeSteps> decode_steps_{};
  int64_t n_decode_steps_ = 0;
};

}  // namespace mmrt::engine
