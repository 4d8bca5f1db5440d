// The slo policy: weighted deadline slack with an aging bound.
//
// Waiting requests fall into three groups, in this order:
//  1. starving: waited at least max_starvation since arrival — oldest first. This is the bound:
//     a request never waits longer than max_starvation plus the admission of the requests that
//     were already starving before it (and KV memory for its first chunk).
//  2. feasible: slack = deadline − now − (predicted time of its own remaining prefill and
//     encoder work) − one full step (the guard: once scheduled, its prefill shares steps with
//     the running requests, which take budget first; without it a request made urgent at the
//     last moment got its first token a few ms late) is >= 0 — ordered by slack / class weight,
//     smallest first (weighted EDF; a request's image tokens and encoder patches make its
//     predicted work, so its slack, smaller).
//     Urgent ones (slack under two full steps) come first, by slack alone (earliest deadline
//     first): by weighted slack, a stream of platinum arrivals kept taking the budget from gold
//     requests admitted earlier until those were late (the promise sweep, docs/benchmarks.md).
//     A slack under zero by less than the guard counts as zero (after the urgent ones, before
//     every other feasible one, by arrival): admission and the late check (whose margin is the step
//     actually in flight) still count it on time, so the requests arriving after it do not go
//     first (at 6 req/s a platinum request, whose own work and a full step are about its 300 ms,
//     fell into group 3 after a few ms and was refused late behind later arrivals 9-16 times a
//     run, where fcfs refused none). Made urgent instead, such requests went before the urgent
//     ones and some of them, nearly late, were served late at 48 req/s.
//  3. already late: cannot meet its deadline any more — by class weight, then deadline. Serving
//     the savable first is what raises attainment under load; group 1 keeps these from starving.
// Running requests (who decodes first, who is preempted last): class weight, then deadline. A
// running prompt still in prefill gets its next chunk in the order above, with the waiting ones.
#include <algorithm>
#include <limits>

#include "engine/cost_model.h"
#include "engine/policy.h"

namespace mmrt::engine {

namespace {

class SloPolicy : public Policy {
 public:
  explicit SloPolicy(const PolicyContext& ctx) : ctx_(ctx) {}
  const char* name() const override { return "slo"; }

  double own_work_ns(const Request& r) const {
    if (!ctx_.cost) return 0;
    StepFeatures f;
    f.prefill_tokens = static_cast<double>(r.num_tokens() - r.num_computed);
    for (const auto& m : r.media) {
      f.encoder_patches += static_cast<double>(m.encoder_cost);
      f.encoder_items += 1;
    }
    return ctx_.cost->predict_ns(f);
  }

  struct Key {
    int group;
    double score;
    double tie;
    bool operator<(const Key& o) const {
      if (group != o.group) return group < o.group;
      if (score != o.score) return score < o.score;
      return tie < o.tie;
    }
  };

  Key key(const Request& r, int64_t now) const {
    if (now - r.arrival_ns >= ctx_.max_starvation_ns)
      return {0, static_cast<double>(r.arrival_ns), static_cast<double>(r.id)};
    const double deadline =
        r.deadline_ns ? static_cast<double>(r.deadline_ns) : std::numeric_limits<double>::max() / 4;
    const double guard =
        ctx_.cost ? ctx_.cost->predict_ns({static_cast<double>(ctx_.step_tokens)}) : 0.0;
    const double slack = deadline - static_cast<double>(now) - own_work_ns(r) - guard;
    if (slack >= 0 && slack < 2 * guard) {
      // A prompt whose prefill has begun finishes first: refused late, its computed tokens
      // would be work no client gets.
      const double committed = r.status == RequestStatus::kRunning && r.num_computed > 0 ? 0 : 1;
      return {1, committed * slack, static_cast<double>(r.arrival_ns)};
    }
    if (slack >= 0) return {2, slack / std::max(1e-6, r.weight), static_cast<double>(r.arrival_ns)};
    if (slack >= -guard) return {2, 0.0, static_cast<double>(r.arrival_ns)};
    return {3, -r.weight, deadline};
  }

  void order_waiting(std::vector<Request*>& w, int64_t now) const override {
    std::vector<std::pair<Key, Request*>> keyed;
    keyed.reserve(w.size());
    for (Request* r : w) keyed.push_back({key(*r, now), r});
    std::stable_sort(keyed.begin(), keyed.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < w.size(); ++i) w[i] = keyed[i].second;
  }

  bool serves_first(const Request& q, const Request& in, int64_t now) const override {
    return key(q, now) < key(in, now);
  }

  void order_running(std::vector<Request*>& r, int64_t) const override {
    std::stable_sort(r.begin(), r.end(), [](const Request* a, const Request* b) {
      if (a->weight != b->weight) return a->weight > b->weight;
      int64_t da = a->deadline_ns ? a->deadline_ns : INT64_MAX,
              db = b->deadline_ns ? b->deadline_ns : INT64_MAX;
      if (da != db) return da < db;
      return a->arrival_ns != b->arrival_ns ? a->arrival_ns < b->arrival_ns : a->id < b->id;
    });
  }

 private:
  PolicyContext ctx_;
};

}  // namespace

std::unique_ptr<Policy> make_slo_policy(const PolicyContext& ctx) {
  return std::make_unique<SloPolicy>(ctx);
}

}  // namespace mmrt::engine
