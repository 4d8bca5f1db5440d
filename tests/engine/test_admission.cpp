// Admission on its own: a view of a queue built by hand, a cost model trained on a known step-time
// law, the default SLA classes. Decisions at arrival (admit, downgrade, refuse, best effort),
// what counts as queued ahead (policy order, media still being preprocessed), late refusal, and
// the learned per-class bias.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "engine/admission.h"
#include "engine/policy.h"

using namespace mmrt;
using namespace mmrt::engine;

namespace {

constexpr int64_t kMs = 1'000'000;

// Step time law: 3 ms + 40 us per prefill token + 200 us per decoding sequence + 20 us per patch.
double law(const StepFeatures& f) {
  return 3e6 + 40e3 * f.prefill_tokens + 200e3 * f.decode_tokens + 20e3 * f.encoder_patches;
}
// Its encoder jobs' share, as the executor times it.
double encoder_share(const StepFeatures& f) {
  return 20e3 * f.encoder_patches;
}

// Decode-only steps of 1..16 sequences at the law, as the engine reports them.
void measure_decode(Admission& adm) {
  for (int i = 0; i < 32; ++i) {
    const StepFeatures f{0, static_cast<double>(1 + i % 16), 0, 0};
    adm.observe_step(f, law(f));
  }
}

CostModel trained() {
  CostModel c;
  std::mt19937 rng(7);
  for (int i = 0; i < 600; ++i) {
    StepFeatures f{static_cast<double>(rng() % 512), static_cast<double>(rng() % 16),
                   static_cast<double>((rng() % 4) * 256), 0};
    // Chunks anywhere in prompts of up to 16000 tokens: this law's steps cost nothing for
    // their attention, and the fit learns that too.
    const double start = static_cast<double>(rng() % 16000);
    f.prefill_pairs = causal_pairs(start, start + f.prefill_tokens);
    c.observe(f, law(f), encoder_share(f));
  }
  return c;
}

class View : public SchedulerView {
 public:
  explicit View(const std::string& policy, const CostModel* cost = nullptr)
      : policy_(make_policy(policy, {cost, 10'000'000'000})) {}
  std::span<Request* const> running() const override { return running_; }
  std::span<Request* const> waiting() const override { return waiting_; }
  int32_t token_budget() const override { return 512; }
  int32_t token_budget_with(int64_t tpot_target_ns) const override {
    return budget_with_ > 0 && tpot_target_ns > 0 ? budget_with_ : token_budget();
  }
  const Policy& policy() const override { return *policy_; }
  int64_t cached_prefix_tokens(const Request&) const override { return 0; }
  bool encoder_cached(const Hash128&) const override { return false; }

  std::vector<Request*> running_, waiting_;
  std::unique_ptr<Policy> policy_;
  int32_t budget_with_ = 0;  // token_budget_with for a TPOT target (0: the same budget)
};

struct Reqs {
  std::vector<std::unique_ptr<Request>> all;
  // A request of `cls` (or none) with a `prompt`-token text prompt, arriving at `arrival`.
  Request* make(const SlaConfig& sla, const std::string& cls, int prompt, int64_t arrival) {
    auto r = std::make_unique<Request>();
    r->id = all.size() + 1;
    r->arrival_ns = arrival;
    r->prompt.assign(static_cast<size_t>(prompt), 1);
    r->sampling.max_tokens = 8;
    r->sla_class = cls;
    if (!cls.empty()) {
      const SlaClass& c = sla.get(cls);
      r->weight = c.weight;
      r->deadline_ns = c.ttft_ns ? arrival + c.ttft_ns : 0;
      r->tpot_target_ns = c.tpot_ns;
    }
    all.push_back(std::move(r));
    return all.back().get();
  }
};

}  // namespace

TEST(Admission, AdmitsWhatFitsAndRefusesWhatCannot) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Admission adm(sla, cost);
  View v("fcfs");
  Reqs q;
  std::string why;
  // 200 tokens alone: one step of ~11 ms, well inside platinum's 300 ms.
  Request* a = q.make(sla, "platinum", 200, 0);
  ASSERT_TRUE(adm.admit(*a, v, 0, why)) << why;
  EXPECT_NEAR(static_cast<double>(a->predicted_ttft_ns), law({200, 0, 0, 0}), 0.1 * 11e6);
  // 9000 tokens queued ahead (18 steps of ~23.5 ms = ~420 ms): platinum cannot start in time.
  Request* big = q.make(sla, "silver", 9000, 0);
  v.waiting_.push_back(big);
  Request* b = q.make(sla, "platinum", 200, 0);
  EXPECT_FALSE(adm.admit(*b, v, 0, why));
  EXPECT_NE(why.find("exceeds the platinum class's 300 ms"), std::string::npos) << why;
  EXPECT_NE(why.find("9000 prompt tokens queued ahead"), std::string::npos) << why;
  EXPECT_EQ(adm.stats().refused, 1);
  // Gold (800 ms) fits; a request of no class is never refused.
  Request* c = q.make(sla, "gold", 200, 0);
  EXPECT_TRUE(adm.admit(*c, v, 0, why)) << why;
  EXPECT_EQ(c->sla_class, "gold");
  Request* d = q.make(sla, "", 200, 0);
  EXPECT_TRUE(adm.admit(*d, v, 0, why));
  EXPECT_EQ(d->predicted_ttft_ns, 0) << "best effort: no prediction made";
}

// The decision's margin is the step that may be in flight: a full step of the budget only where
// other prompts are in progress. A request that fits its class alone on an idle engine is
// admitted, not refused for a step that is not running (seen: a lone image request refused on an
// idle 2b-shape server, its 3.3 s of work + a 1.8 s full step over silver's 5 s).
// A long prompt is priced with its own attention: on an engine whose chunks slow down as the
// prompt grows, a 9,000-token silver prompt (~9 s here) is refused at arrival as beyond the class
// on this server, not admitted at the steps' ~2.3 s and refused late into its prefill.
TEST(Admission, ALongPromptIsRefusedAtArrivalForItsOwnAttention) {
  auto attention_law = [](const StepFeatures& f) {
    return 4e6 + 250e3 * f.prefill_tokens + 500e3 * f.decode_tokens + 170.0 * f.prefill_pairs;
  };
  CostModel cost;
  std::mt19937 rng(11);
  for (int i = 0; i < 600; ++i) {
    const double start = 512.0 * static_cast<double>(rng() % 18);
    StepFeatures f{512, static_cast<double>(rng() % 8), 0, start + 512};
    f.prefill_pairs = causal_pairs(start, start + 512);
    cost.observe(f, attention_law(f));
  }
  const SlaConfig sla = SlaConfig::defaults();
  Admission adm(sla, cost);
  View v("fcfs");
  Reqs q;
  std::string why;
  Request* longer = q.make(sla, "silver", 9000, 0);
  EXPECT_FALSE(adm.admit(*longer, v, 0, why));
  EXPECT_NE(why.find("its own work alone"), std::string::npos) << why;
  EXPECT_GT(static_cast<double>(longer->predicted_ttft_ns), 8e9) << "~9 s, not the steps' 2.3 s";
  Request* shorter = q.make(sla, "silver", 4000, 0);
  EXPECT_TRUE(adm.admit(*shorter, v, 0, why)) << why;
  EXPECT_NEAR(static_cast<double>(shorter->predicted_ttft_ns), 2.4e9, 0.15 * 2.4e9);
}

TEST(Admission, TheMarginIsTheStepInFlight) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Admission adm(sla, cost);
  View v("fcfs");
  Reqs q;
  std::string why;
  // 6000 tokens alone: 12 full steps of ~23.5 ms = ~282 ms, inside platinum's 300 ms only
  // without a full step's margin.
  Request* lone = q.make(sla, "platinum", 6000, 0);
  ASSERT_TRUE(adm.admit(*lone, v, 0, why)) << why;
  const double full_step = law({512, 0, 0, 0});
  EXPECT_LT(static_cast<double>(lone->predicted_ttft_ns) + full_step, 330.0 * kMs);
  EXPECT_GT(static_cast<double>(lone->predicted_ttft_ns) + full_step, 300.0 * kMs)
      << "the test's request must need the smaller margin";
  // The same with another prompt waiting (behind it in fcfs order, so not queued ahead): a
  // full step may be in flight when it arrives, and the margin says so.
  v.waiting_.push_back(q.make(sla, "silver", 100, 1));
  Request* busy = q.make(sla, "platinum", 6000, 0);
  EXPECT_FALSE(adm.admit(*busy, v, 0, why));
  EXPECT_NE(why.find("margin"), std::string::npos) << why;
}

// Before its media is fetched: a shell of no work of its own is refused only when the queue
// alone breaks a refusing class's promise; nothing is recorded.
TEST(Admission, PrecheckRefusesOnTheQueueAloneAndRecordsNothing) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Admission adm(sla, cost);
  View v("fcfs");
  Reqs q;
  std::string why;
  Request* empty = q.make(sla, "platinum", 0, 0);
  EXPECT_TRUE(adm.precheck(*empty, v, 0, why)) << why;
  // A 200-token platinum request behind ~230 ms of queue fits as a shell (its own prompt is not
  // counted yet); 9000 queued tokens (~420 ms) break the promise before any prompt of its own.
  Request* mid = q.make(sla, "silver", 5000, 0);
  v.waiting_.push_back(mid);
  Request* s1 = q.make(sla, "platinum", 0, 0);
  EXPECT_TRUE(adm.precheck(*s1, v, 0, why)) << why;
  v.waiting_.back() = q.make(sla, "silver", 9000, 0);
  Request* s2 = q.make(sla, "platinum", 0, 0);
  EXPECT_FALSE(adm.precheck(*s2, v, 0, why));
  EXPECT_NE(why.find("before its own prompt and media are counted"), std::string::npos) << why;
  // Gold would be downgraded, not refused: the real admission decides after the download.
  Request* g = q.make(sla, "gold", 0, 0);
  v.waiting_.back() = q.make(sla, "silver", 30000, 0);
  EXPECT_TRUE(adm.precheck(*g, v, 0, why));
  EXPECT_EQ(g->sla_class, "gold");
  EXPECT_EQ(adm.stats().refused, 0);
  EXPECT_EQ(adm.stats().downgraded, 0);
}

TEST(Admission, GoldThatCannotBeMetIsDowngradedToSilver) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Admission adm(sla, cost);
  View v("fcfs");
  Reqs q;
  Request* ahead = q.make(sla, "silver", 30000, 0);  // ~1.4 s of prefill ahead
  v.waiting_.push_back(ahead);
  Request* g = q.make(sla, "gold", 100, 0);
  std::string why;
  EXPECT_TRUE(adm.admit(*g, v, 0, why)) << why;
  EXPECT_EQ(g->sla_class, "silver");
  EXPECT_EQ(g->deadline_ns, 5000 * kMs);
  EXPECT_EQ(g->tpot_target_ns, 0) << "silver promises no TPOT";
  EXPECT_EQ(adm.stats().downgraded, 1);
  // A TPOT the request asked for itself stays with it in the lower class.
  Request* own = q.make(sla, "gold", 100, 0);
  own->tpot_target_ns = 90 * kMs;
  own->own_tpot = true;
  EXPECT_TRUE(adm.admit(*own, v, 0, why)) << why;
  EXPECT_EQ(own->sla_class, "silver");
  EXPECT_EQ(own->tpot_target_ns, 90 * kMs);
}

// A deadline of the request's own is refused when missed, whatever its class's rule (gold
// would be downgraded).
TEST(Admission, AMissedOwnDeadlineIsRefusedInAnyClass) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Admission adm(sla, cost);
  View v("fcfs");
  Reqs q;
  v.waiting_.push_back(q.make(sla, "silver", 30000, 0));  // ~1.4 s of prefill ahead
  Request* g = q.make(sla, "gold", 100, 0);
  g->own_deadline = true;
  std::string why;
  EXPECT_FALSE(adm.admit(*g, v, 0, why));
  EXPECT_EQ(g->sla_class, "gold");
  EXPECT_EQ(adm.stats().downgraded, 0);
}

// Under slo a platinum arrival goes before waiting silver work (not queued ahead); under fcfs it
// waits behind it.
TEST(Admission, WhatCountsAsQueuedFollowsThePolicy) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Reqs q;
  for (const char* policy : {"fcfs", "slo"}) {
    SCOPED_TRACE(policy);
    Admission adm(sla, cost);
    View v(policy, &cost);
    v.waiting_.push_back(q.make(sla, "silver", 9000, 0));
    Request* p = q.make(sla, "platinum", 200, 1);
    std::string why;
    const bool admitted = adm.admit(*p, v, 1, why);
    EXPECT_EQ(admitted, std::string(policy) == "slo") << why;
  }
}

// A gold request of 16000 tokens admitted at 0 and waiting: 32 steps (~752 ms) + the one-step
// margin, inside gold's 800 ms with nothing to spare for 1000 more tokens ahead of it.
namespace {
Request* queue_gold(Admission& adm, View& v, Reqs& q, const SlaConfig& sla) {
  Request* gold = q.make(sla, "gold", 16000, 0);
  std::string why;
  EXPECT_TRUE(adm.admit(*gold, v, 0, why)) << why;
  EXPECT_EQ(gold->sla_class, "gold");
  v.waiting_.push_back(gold);
  return gold;
}
}  // namespace

// Promises kept: under slo a platinum arrival goes before a waiting gold request. It is refused
// when its work would make that gold request late (one that is on time without it), and
// admitted when it would not. Step law: a full 512-token step is ~23.5 ms.
TEST(Admission, RefusesWhatWouldMakeAnAdmittedRequestLate) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Admission adm(sla, cost);
  View v("slo", &cost);
  Reqs q;
  std::string why;
  Request* gold = queue_gold(adm, v, q, sla);
  // 1000 tokens ahead of it make 34 steps (~800 ms): gold would be late.
  Request* big = q.make(sla, "platinum", 1000, kMs);
  EXPECT_FALSE(adm.admit(*big, v, kMs, why));
  EXPECT_NE(why.find("would make a gold request admitted before it late by"), std::string::npos)
      << why;
  EXPECT_EQ(adm.stats().displacing, 1);
  EXPECT_GT(big->retry_after_ns, 0);
  EXPECT_LE(big->retry_after_ns, 800 * kMs);
  // 300 tokens still fit in gold's 32 steps: admitted ahead of it, gold keeps its promise.
  Request* small = q.make(sla, "platinum", 300, kMs);
  EXPECT_TRUE(adm.admit(*small, v, kMs, why)) << why;
  EXPECT_LT(small->predicted_ttft_ns, 100 * kMs) << "not served before the gold request";
  EXPECT_EQ(adm.stats().displacing, 1);
  // fcfs serves arrivals last: nobody is displaced, whatever their size.
  Admission fcfs_adm(sla, cost);
  View fv("fcfs", &cost);
  fv.waiting_.push_back(gold);
  Request* later = q.make(sla, "silver", 1000, kMs);
  EXPECT_TRUE(fcfs_adm.admit(*later, fv, kMs, why)) << why;
  EXPECT_EQ(fcfs_adm.stats().displacing, 0);
}

// A token takes at least the decode step of every running request and the new one; no budget
// makes it shorter. With 240 running (3 + 0.2 x 241 = 51.2 ms a step) platinum's 50 ms per token
// cannot be kept: refused, with a retry when six have finished (the step is then 50 ms); gold's 100
// ms can. With 500 running gold downgrades to silver (no TPOT promise); a TPOT of the request's
// own is refused instead. One slow decode step moves nothing (the median of the recent ones);
// before enough decode steps were measured nothing is judged.
TEST(Admission, ATimePerTokenTheDecodeStepCannotKeepIsAMiss) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Admission adm(sla, cost);
  measure_decode(adm);
  adm.observe_step({0, 1, 0, 0}, 600.0 * kMs);  // one slow step (a first call's set-up)
  View v("fcfs");
  Reqs q;
  std::string why;
  auto fill = [&](int n) {
    v.running_.clear();
    for (int i = 0; i < n; ++i) {
      Request* r = q.make(sla, "silver", 1, 0);
      r->sampling.max_tokens = 10 + i;  // decodes left: 10, 11, ...
      r->num_computed = 1;
      v.running_.push_back(r);
    }
  };
  fill(240);
  Request* p = q.make(sla, "platinum", 10, 0);
  EXPECT_FALSE(adm.admit(*p, v, 0, why));
  EXPECT_NE(why.find("predicted to take 51 ms"), std::string::npos) << why;
  EXPECT_NE(why.find("platinum class's 50 ms per output token"), std::string::npos) << why;
  EXPECT_EQ(why.find("cannot serve"), std::string::npos) << why;
  // Six must finish (the sixth has 15 tokens left); the seventh where the fit rounds 50.0 ms up.
  EXPECT_GE(static_cast<double>(p->retry_after_ns), 0.97 * 15 * 51.2 * kMs);
  EXPECT_LE(static_cast<double>(p->retry_after_ns), 1.03 * 16 * 51.2 * kMs);
  EXPECT_EQ(adm.stats().tpot_misses, 1);
  Request* g = q.make(sla, "gold", 10, 0);
  EXPECT_TRUE(adm.admit(*g, v, 0, why)) << why;
  EXPECT_EQ(g->sla_class, "gold");

  fill(500);
  Request* g2 = q.make(sla, "gold", 10, 0);
  EXPECT_TRUE(adm.admit(*g2, v, 0, why)) << why;
  EXPECT_EQ(g2->sla_class, "silver");
  EXPECT_EQ(g2->tpot_target_ns, 0);
  Request* own = q.make(sla, "gold", 10, 0);
  own->own_tpot = true;
  EXPECT_FALSE(adm.admit(*own, v, 0, why));
  EXPECT_NE(why.find("request's own 100 ms per output token"), std::string::npos) << why;
  EXPECT_EQ(adm.stats().tpot_misses, 3);

  // A target no step can keep, even alone: no retry helps.
  Request* tiny = q.make(sla, "platinum", 10, 0);
  tiny->tpot_target_ns = 2 * kMs;
  tiny->own_tpot = true;
  v.running_.clear();
  EXPECT_FALSE(adm.admit(*tiny, v, 0, why));
  EXPECT_NE(why.find("cannot serve it"), std::string::npos) << why;
  EXPECT_EQ(tiny->retry_after_ns, -1);

  Admission unmeasured(sla, cost);  // no decode step measured
  fill(500);
  Request* p2 = q.make(sla, "platinum", 10, 0);
  EXPECT_TRUE(unmeasured.admit(*p2, v, 0, why)) << why;
  EXPECT_EQ(p2->sla_class, "platinum");
}

// A request that the running requests' decode step fits without but not with would make a
// running request with such a target late on every token: its miss (platinum's rule: refused).
TEST(Admission, ATimePerTokenItWouldBreakForAnotherIsAMiss) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Admission adm(sla, cost);
  measure_decode(adm);
  View v("fcfs");
  Reqs q;
  std::string why;
  for (int i = 0; i < 100; ++i) {
    Request* r = q.make(sla, "silver", 1, 0);
    r->num_computed = 1;
    v.running_.push_back(r);
  }
  // 100 decoding: 23.0 ms a step, 101: 23.2 ms. A running request promised 23.1 ms per token.
  v.running_[7]->tpot_target_ns = 23'100'000;
  v.running_[7]->sla_class = "gold";
  Request* p = q.make(sla, "platinum", 10, 0);
  EXPECT_FALSE(adm.admit(*p, v, 0, why));
  EXPECT_NE(why.find("would make a gold request admitted before it late on its time per output "
                     "token"),
            std::string::npos)
      << why;
  EXPECT_EQ(adm.stats().displacing, 1);
  EXPECT_GE(p->retry_after_ns, 0);
  v.running_[7]->tpot_target_ns = 23'300'000;  // kept with it too
  Request* p2 = q.make(sla, "platinum", 10, 0);
  EXPECT_TRUE(adm.admit(*p2, v, 0, why)) << why;
}

// A class that downgrades on a miss does so when it would displace, and decides again in the
// lower class (here: platinum -> gold, which would miss on its own -> silver, which fits).
TEST(Admission, DisplacingDowngradesAndDecidesAgain) {
  SlaConfig sla = SlaConfig::defaults();
  sla.classes[0].on_miss = OnMiss::kDowngrade;
  const CostModel cost = trained();
  Admission adm(sla, cost);
  View v("slo", &cost);
  Reqs q;
  std::string why;
  queue_gold(adm, v, q, sla);
  Request* p = q.make(sla, "platinum", 1000, kMs);
  EXPECT_TRUE(adm.admit(*p, v, kMs, why)) << why;
  EXPECT_EQ(p->sla_class, "silver");
  EXPECT_EQ(p->deadline_ns, kMs + 5000 * kMs);
  EXPECT_EQ(adm.stats().displacing, 1);
  EXPECT_EQ(adm.stats().downgraded, 2);
}

// A request with a TPOT target shortens the steps once it decodes (the batch controller keeps its
// schedule): the prefill queued behind it then runs in smaller slices. A silver request admitted
// near its deadline (100,000 tokens: ~4.6 s at 512-token steps of ~23.5 ms) stays on time after a
// gold arrival of 200 tokens at the same budget, and would not in 128-token steps (~8.1 ms for
// 125 prompt tokens: ~6.5 s): gold is then downgraded (and admitted as silver, behind it).
TEST(Admission, AShorterStepItsTargetForcesCountsAsDisplacing) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Reqs q;
  std::string why;
  for (const int32_t with : {0, 128}) {
    Admission adm(sla, cost);
    View v("slo", &cost);
    v.budget_with_ = with;
    Request* silver = q.make(sla, "silver", 100000, 0);
    ASSERT_TRUE(adm.admit(*silver, v, 0, why)) << why;
    v.waiting_.push_back(silver);
    Request* gold = q.make(sla, "gold", 200, kMs);
    EXPECT_TRUE(adm.admit(*gold, v, kMs, why)) << why;
    EXPECT_EQ(gold->sla_class, with ? "silver" : "gold") << with;
    if (with == 0)
      EXPECT_LT(gold->predicted_ttft_ns, 100 * kMs) << "served before the silver request";
    else
      EXPECT_GT(gold->predicted_ttft_ns, 4000 * kMs) << "behind it as silver";
    EXPECT_EQ(adm.stats().displacing, with ? 1 : 0) << with;
  }
}

// The other way round: a prompt served before the newcomer decodes, on its TPOT schedule, while
// the newcomer's prompt still runs, so the newcomer is predicted at the budget that target leaves.
// 4000 tokens behind a short waiting gold request: ~210 ms at 512-token steps, ~270 ms in 128-token
// steps (33 steps of ~8 ms: the per-step 3 ms counted four times as often).
TEST(Admission, APromptAheadWithATargetSlowsTheNewcomersPrefill) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Reqs q;
  std::string why;
  int64_t predicted[2] = {0, 0};
  for (const int32_t with : {0, 128}) {
    Admission adm(sla, cost);
    View v("slo", &cost);
    v.budget_with_ = with;
    queue_gold(adm, v, q, sla);
    v.waiting_[0]->prompt.resize(200);  // short: served first, then decodes
    Request* silver = q.make(sla, "silver", 4000, kMs);
    ASSERT_TRUE(adm.admit(*silver, v, kMs, why)) << why;
    predicted[with ? 1 : 0] = silver->predicted_ttft_ns;
  }
  EXPECT_GT(predicted[1], predicted[0] + 40 * kMs) << predicted[0] << " " << predicted[1];
}

// With the reservation (slo:reserve) a silver request is admitted only with room for the recent
// inflow of heavier classes: after a burst of platinum admissions, the same silver request that
// fits without it is refused, the message naming the reserved share.
TEST(Admission, TheReservationKeepsRoomForHeavierClasses) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Reqs q;
  std::string why;
  for (bool reserve : {false, true}) {
    SCOPED_TRACE(reserve);
    Admission adm(sla, cost, reserve);
    View v("slo", &cost);
    // 5 s of arrivals: 100 platinum requests of 500 tokens (2 s of marginal prefill work: 40 %
    // of the engine).
    for (int i = 0; i < 100; ++i) {
      Request* p = q.make(sla, "platinum", 500, i * 50 * kMs);
      ASSERT_TRUE(adm.admit(*p, v, i * 50 * kMs, why)) << why;
    }
    // A silver request behind 75,000 queued tokens (147 steps, ~3.45 s): it fits 5 s, but not
    // once 40 % of the engine is set aside for the platinum inflow (3.45 s / 0.6 = 5.8 s).
    v.waiting_.push_back(q.make(sla, "silver", 75000, 4999 * kMs));
    Request* s = q.make(sla, "silver", 200, 5000 * kMs);
    const bool admitted = adm.admit(*s, v, 5000 * kMs, why);
    EXPECT_EQ(admitted, !reserve) << why;
    if (reserve) {
      EXPECT_NE(why.find("% of the engine reserved for heavier classes"), std::string::npos) << why;
    }
  }
}

// A request still in media preprocessing (its prompt laid out from the media headers) is queued
// ahead of later arrivals; the arrival's own media decode time is part of its prediction.
TEST(Admission, PendingMediaCountsByItsEstimate) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Admission adm(sla, cost);
  View v("fcfs");
  Reqs q;
  Request* img = q.make(sla, "silver", 9000, 0);
  img->media_pending = true;
  MediaItem m;
  m.begin = 10;
  m.n_tokens = 1024;
  m.encoder_cost = 4096;
  img->media.push_back(m);
  v.waiting_.push_back(img);
  Request* p = q.make(sla, "platinum", 50, 0);
  std::string why;
  EXPECT_FALSE(adm.admit(*p, v, 0, why)) << "the pending image request was not counted";
  v.waiting_.clear();
  Request* own = q.make(sla, "platinum", 300, 0);
  own->media_pending = true;
  own->expected_media_ns = 400.0 * kMs;  // a big photo to decode first
  EXPECT_FALSE(adm.admit(*own, v, 0, why)) << "its own decode time was not counted";
  EXPECT_GT(own->predicted_ttft_ns, 400 * kMs);
  Request* small = q.make(sla, "platinum", 300, 0);
  small->media_pending = true;
  small->expected_media_ns = 5.0 * kMs;
  EXPECT_TRUE(adm.admit(*small, v, 0, why)) << why;
}

TEST(Admission, LateRequestsAreRefusedAndCountedApart) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Admission adm(sla, cost);
  View v("fcfs");
  Reqs q;
  Request* fresh = q.make(sla, "platinum", 100, 0);
  Request* late = q.make(sla, "platinum", 100, 0);
  late->timeline.add(Event::kEncoderEnd, 1);  // its encoder ran already
  Request* served = q.make(sla, "platinum", 100, 0);
  served->output.push_back(5);  // has its first token: never late-refused
  Request* gold = q.make(sla, "gold", 100, 0);
  v.waiting_ = {late, served, gold};
  // 290 ms after arrival: another ~7 ms step misses 300 ms; gold's 800 ms is still fine.
  auto refused = adm.expire_late(v, 296 * kMs);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].r, late);
  EXPECT_NE(refused[0].reason.find("296 ms after arrival"), std::string::npos) << refused[0].reason;
  EXPECT_EQ(adm.stats().refused_late, 1);
  EXPECT_EQ(adm.stats().refused_after_encode, 1);
  // Past gold's promise: downgraded in place, not refused.
  EXPECT_TRUE(adm.expire_late(v, 900 * kMs).size() == 1);  // `late` again
  EXPECT_EQ(gold->sla_class, "silver");
  EXPECT_EQ(adm.stats().downgraded_late, 1);
  (void)fresh;
}

TEST(Admission, LearnsThePerClassBias) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Admission adm(sla, cost);
  View v("fcfs");
  Reqs q;
  EXPECT_EQ(adm.ttft_bias(4.0), 1.0);
  for (int i = 0; i < 8; ++i) {
    Request* r = q.make(sla, "platinum", 200, 0);
    std::string why;
    ASSERT_TRUE(adm.admit(*r, v, 0, why));
    // The first token took twice what the model said.
    adm.observe_first_token(*r, r->arrival_ns + 2 * r->model_ttft_ns);
  }
  EXPECT_NEAR(adm.ttft_bias(4.0), 2.0, 1e-6);
  EXPECT_EQ(adm.ttft_bias(1.0), 1.0) << "another class learned it";
  // The next prediction carries the bias.
  Request* r = q.make(sla, "platinum", 200, 0);
  std::string why;
  ASSERT_TRUE(adm.admit(*r, v, 0, why));
  EXPECT_NEAR(static_cast<double>(r->predicted_ttft_ns),
              2.0 * static_cast<double>(r->model_ttft_ns), 2.0);
}

// The bias is the least-squares slope of actual on modelled TTFT: a burst's first silver
// requests, modelled at 0.4 s and served at 3 s (heavier classes overtook them in their slack),
// do not hold the bias far above what predictions near the deadline need. The mean of log
// ratios it replaced gave 1.96x here (and 3.7x in the promise sweep), the slope 1.18x.
TEST(Admission, TheBiasWeighsPredictionsNearTheDeadline) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Admission adm(sla, cost);
  Reqs q;
  auto sample = [&](double model_ms, double actual_ms) {
    Request* r = q.make(sla, "silver", 200, 0);
    r->model_ttft_ns = static_cast<int64_t>(model_ms * kMs);
    adm.observe_first_token(*r, static_cast<int64_t>(actual_ms * kMs));
  };
  for (int i = 0; i < 8; ++i) sample(400, 3000);
  for (int i = 0; i < 20; ++i) sample(3500, 4000);
  const double expect =
      (8 * 3000.0 * 400 + 20 * 4000.0 * 3500) / (8 * 400.0 * 400 + 20 * 3500.0 * 3500);
  EXPECT_NEAR(adm.ttft_bias(1.0), expect, 1e-9);
  EXPECT_LT(adm.ttft_bias(1.0), 1.2);
  // The window forgets: 64 later samples at 0.9x replace them all.
  for (int i = 0; i < 64; ++i) sample(3000, 2700);
  EXPECT_NEAR(adm.ttft_bias(1.0), 0.9, 1e-9);
}

// The class's safety on predicted work: requests of a class admitted in time and then refused
// late or served late raise it (the queue's admissions keep more room), first tokens in time
// lower it again, and the prediction itself and the other classes stay as they were.
TEST(Admission, LateRequestsRaiseTheirClassesSafetyAndTimelyOnesLowerIt) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Admission adm(sla, cost, /*reserve=*/false, /*safety=*/true);
  View v("fcfs");
  Reqs q;
  std::string why;
  // 4730 silver tokens ahead: ~9.6 steps of ~23.5 ms, then its own 200 tokens and a step's
  // margin: ~270 ms of platinum's 300, about 30 ms to spare.
  Request* big = q.make(sla, "silver", 4730, 0);
  v.waiting_.push_back(big);
  Request* first = q.make(sla, "platinum", 200, 0);
  ASSERT_TRUE(adm.admit(*first, v, 0, why)) << why;
  const double work = static_cast<double>(first->predicted_ttft_ns);
  const double queue = work - law({200, 0, 0, 0});  // the safety's share: the work ahead
  ASSERT_GT(queue, 200.0 * kMs);
  ASSERT_LT(work + law({512, 0, 0, 0}) + 0.1 * queue, 300.0 * kMs) << "10 % would still fit";
  ASSERT_GT(work + law({512, 0, 0, 0}) + 0.2 * queue, 300.0 * kMs) << "20 % would not";
  EXPECT_EQ(adm.safety(4.0), 1.0);

  // Three platinum requests admitted on an idle engine come late (served past their deadline)
  // and one is refused late (still waiting, its whole prompt left, 290 ms after arrival).
  View idle("fcfs");
  for (int i = 0; i < 4; ++i) {
    Request* r = q.make(sla, "platinum", 200, 0);
    ASSERT_TRUE(adm.admit(*r, idle, 0, why)) << why;
    if (i < 3) {
      adm.observe_first_token(*r, r->deadline_ns + 1);
    } else {
      idle.waiting_.push_back(r);
      ASSERT_EQ(adm.expire_late(idle, 290 * kMs).size(), 1u);
    }
  }
  EXPECT_NEAR(adm.safety(4.0), 1.0 + 4 * Admission::kSafetyStep, 1e-12);
  EXPECT_EQ(adm.safety(1.0), 1.0) << "another class's requests were on time";

  // The same request as `first` now leaves too little room: refused, its margin says so.
  Request* second = q.make(sla, "platinum", 200, 0);
  EXPECT_FALSE(adm.admit(*second, v, 0, why));
  EXPECT_NE(why.find("margin) exceeds the platinum class's 300 ms"), std::string::npos) << why;
  EXPECT_EQ(second->predicted_ttft_ns, first->predicted_ttft_ns) << "the prediction is the same";
  // A silver request behind the queue is judged without it; a platinum one on an idle engine
  // has no queue for it to scale.
  Request* silver = q.make(sla, "silver", 200, 0);
  EXPECT_TRUE(adm.admit(*silver, v, 0, why)) << why;
  Request* alone = q.make(sla, "platinum", 5800, 0);  // ~270 ms of its own: 1.2x would miss
  EXPECT_TRUE(adm.admit(*alone, View("fcfs"), 0, why)) << why;
  EXPECT_GT(adm.safety(4.0) * static_cast<double>(alone->predicted_ttft_ns), 300.0 * kMs)
      << "scaled whole, its own work would have been refused";

  // First tokens in time bring it back: about 100 of them per late request at a 1 % target.
  int timely = 0;
  while (adm.safety(4.0) > 1.0 && timely < 1000) {
    Request* r = q.make(sla, "platinum", 200, 0);
    ASSERT_TRUE(adm.admit(*r, View("fcfs"), 0, why)) << why;
    adm.observe_first_token(*r, r->arrival_ns + 10 * kMs);
    ++timely;
  }
  EXPECT_NEAR(timely, 4 * (1 - Admission::kLateTarget) / Admission::kLateTarget, 2);
  Request* third = q.make(sla, "platinum", 200, 0);
  EXPECT_TRUE(adm.admit(*third, v, 0, why)) << why;
  // Never above kMaxSafety, however many come late.
  for (int i = 0; i < 100; ++i) {
    Request* r = q.make(sla, "gold", 200, 0);
    ASSERT_TRUE(adm.admit(*r, View("fcfs"), 0, why)) << why;
    adm.observe_first_token(*r, r->deadline_ns + 1);
  }
  EXPECT_EQ(adm.safety(2.0), Admission::kMaxSafety);
  // Without the option (the default) it stays 1.
  Admission plain(sla, cost);
  for (int i = 0; i < 10; ++i) {
    Request* r = q.make(sla, "gold", 200, 0);
    ASSERT_TRUE(plain.admit(*r, View("fcfs"), 0, why)) << why;
    plain.observe_first_token(*r, r->deadline_ns + 1);
  }
  EXPECT_EQ(plain.safety(2.0), 1.0);
}

// The quote a worker publishes for a cluster's router (engine/admission.h, Quote): per class, what
// admission predicts for a request of no work of its own (its margin and the class's bias
// included), and own work priced per token at a full step's time; a request's own admission
// prediction is the quote's ahead + its tokens at that price to within a step.
TEST(Admission, TheQuoteIsWhatAdmissionWouldPredict) {
  const SlaConfig sla = SlaConfig::defaults();
  const CostModel cost = trained();
  Admission adm(sla, cost);
  View v("slo", &cost);
  Reqs q;
  Quote idle = adm.quote(v, 0);
  ASSERT_EQ(idle.classes.size(), 3u) << "every class with a TTFT promise";
  EXPECT_EQ(idle.classes[0].name, "platinum");
  for (const auto& c : idle.classes) {  // a step's fixed 3 ms, and as much for the margin
    EXPECT_NEAR(c.ahead_ms, 6.0, 0.5) << c.name << ": nothing queued";
    EXPECT_DOUBLE_EQ(c.floor_ms, c.ahead_ms) << c.name << ": none of it drains";
  }
  const double full = law({512, 0, 0, 0});
  EXPECT_NEAR(idle.token_ns, full / 512, 0.05 * full / 512);
  EXPECT_NEAR(idle.token_idle_ns, full / 512, 0.05 * full / 512) << "idle: the same price";
  EXPECT_NEAR(idle.patch_ns, 20e3, 0.1 * 20e3);
  EXPECT_DOUBLE_EQ(idle.pair_ns, cost.pair_ns())
      << "a prompt's own attention, as admission prices it";
  EXPECT_GT(idle.pair_ns, 0.0);
  // 9000 silver tokens waiting: under slo they wait behind platinum, not the other way round.
  v.waiting_.push_back(q.make(sla, "silver", 9000, 0));
  const Quote busy = adm.quote(v, 0);
  EXPECT_LT(busy.classes[0].ahead_ms, 30.0) << "platinum: only the margin";
  EXPECT_GT(busy.classes[2].ahead_ms, 400.0) << "silver: ~18 steps of ~23.5 ms";
  EXPECT_NEAR(busy.classes[2].floor_ms, 3 + law({512, 0, 0, 0}) * 1e-6, 1.0)
      << "an empty step and a full step's margin (another prompt is waiting)";
  // The quote against admission's decision for a request of 200 tokens of its own: its
  // prediction + the margin (a full step: another prompt is waiting).
  std::string why;
  Request* s = q.make(sla, "silver", 200, 0);
  ASSERT_TRUE(adm.admit(*s, v, 0, why)) << why;
  const double router = busy.classes[2].ahead_ms + 200 * busy.token_ns * 1e-6;
  EXPECT_NEAR(router, (static_cast<double>(s->predicted_ttft_ns) + full) * 1e-6, full * 1e-6);
  EXPECT_EQ(adm.stats().refused, 0) << "a quote decides nothing";

  // Each class's prompt_tokens_alone is the boundary of admission's "this server cannot serve it
  // in that class": one token more is refused (or moved down) for its own work alone, that many
  // is not.
  v.waiting_.clear();
  const Quote quote = adm.quote(v, 0);
  int64_t last = 0;
  for (const auto& c : quote.classes) {
    const int64_t n = c.prompt_tokens_alone;
    ASSERT_GT(n, 0) << c.name;
    ASSERT_LT(n, Quote::kMaxQuotedPrompt) << c.name << ": a bound the cost model sets";
    EXPECT_GE(n, last) << c.name << ": a looser class takes a longer prompt (equal biases)";
    last = n;
    // At the boundary: never refused for its own work (the step margin may still move it down
    // or refuse it: that is the queue's, and a retry may help).
    why.clear();
    Request* at = q.make(sla, c.name, static_cast<int>(n), 0);
    if (!adm.admit(*at, v, 0, why)) {
      EXPECT_EQ(why.find("cannot serve it in that class"), std::string::npos)
          << c.name << ": " << why;
      EXPECT_GE(at->retry_after_ns, 0) << c.name;
    }
    // One token more: its own work alone is over the promise.
    why.clear();
    Request* over = q.make(sla, c.name, static_cast<int>(n + 1), 0);
    if (sla.get(c.name).on_miss == OnMiss::kDowngrade) {
      ASSERT_TRUE(adm.admit(*over, v, 0, why)) << why;
      EXPECT_NE(over->sla_class, c.name) << "moved to a class that can take it";
    } else {
      EXPECT_FALSE(adm.admit(*over, v, 0, why)) << c.name;
      EXPECT_NE(why.find("cannot serve it in that class"), std::string::npos)
          << c.name << ": " << why;
      EXPECT_LT(over->retry_after_ns, 0) << "no retry helps";
    }
  }
}
