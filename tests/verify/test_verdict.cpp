// The verdict on synthetic runs: each outcome and the rule that decides it, the k-consecutive
// rule on a frame stream with a forced stall, refusals, attribution, drift and baselines.
#include <gtest/gtest.h>

#include "verify/baseline.h"
#include "verify/verdict.h"

namespace mmrt::verify {
namespace {

using nlohmann::json;
constexpr int64_t kMs = 1'000'000;

Workload base_workload() {
  Workload w;
  w.name = "t";
  w.duration_s = 100;
  w.warmup_s = 0;
  w.rate = 10;
  w.requests = {{.kind = "text"}};
  w.classes = {{.name = "gold", .weight = 1, .ttft = {.p99 = 100}}};
  return w;
}

Observed ok(int64_t t, double ttft_ms, double e2e_ms, int tokens = 4, json stages = nullptr) {
  Observed o;
  o.status = Status::kOk;
  o.scheduled_ns = o.sent_ns = t;
  const int64_t first = t + static_cast<int64_t>(ttft_ms * kMs);
  const int64_t done = t + static_cast<int64_t>(e2e_ms * kMs);
  for (int k = 0; k < tokens; ++k) o.chunk_ns.push_back(first + (done - first) * k / tokens);
  o.done_ns = done;
  o.completion_tokens = tokens;
  o.http_status = 200;
  if (!stages.is_null()) o.mmrt = {{"stages_ms", stages}};
  return o;
}

// n requests of class gold, 0.1 s apart; ttft_of(i) gives each TTFT.
RunRecord run_of(const Workload& w, int n, const std::function<double(int)>& ttft_of) {
  RunRecord r;
  r.workload = w;
  for (int i = 0; i < n; ++i) {
    Planned p;
    p.t_s = i * 0.1;
    p.kind = "text";
    p.sla_class = "gold";
    r.plan.push_back(p);
    const int64_t t = static_cast<int64_t>(p.t_s * 1e9);
    r.observed.push_back(
        ok(t, ttft_of(i), ttft_of(i) + 20, 4,
           json{{"queue", ttft_of(i) * 0.8}, {"prefill", ttft_of(i) * 0.2}, {"decode", 20}}));
  }
  return r;
}

const json* class_of(const json& res, const std::string& name) {
  for (const auto& c : res["classes"])
    if (c["name"] == name) return &c;
  return nullptr;
}

TEST(Verdict, ComfortableRunPasses) {
  const json res = evaluate(run_of(base_workload(), 600, [](int) { return 20.0; }));
  EXPECT_EQ(res["verdict"], "PASS") << res["reasons"].dump(1);
  EXPECT_EQ(outcome_of(res), Outcome::kPass);
  const json* g = class_of(res, "gold");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ((*g)["rules"][0]["status"], "pass");
  EXPECT_EQ((*g)["rules"][0]["samples"], 600);
  EXPECT_EQ((*g)["rules"][0]["needed"], 299);
  EXPECT_EQ(res["classes"].back()["name"], "all");
  EXPECT_EQ(res["requests"].size(), 600u);
}

TEST(Verdict, SlowTailFailsNamingRuleAndStage) {
  // Every 20th request takes 400 ms: 5 % over a 100 ms P99 budget.
  const json res =
      evaluate(run_of(base_workload(), 600, [](int i) { return i % 20 ? 20.0 : 400.0; }));
  EXPECT_EQ(res["verdict"], "FAIL");
  EXPECT_EQ(res["exit_code"], 1);
  ASSERT_FALSE(res["reasons"].empty());
  EXPECT_EQ(res["reasons"][0]["rule"], "gold: ttft p99 <= 100 ms");
  EXPECT_NE(res["reasons"][0]["message"].get<std::string>().find("30 of 600 over budget"),
            std::string::npos)
      << res["reasons"][0]["message"];
  EXPECT_EQ(res["attribution"]["dominant"], "queue");
  EXPECT_EQ(res["attribution"]["violating"]["n"], 30);
  EXPECT_NEAR(res["attribution"]["violating"]["stages_ms"]["queue"].get<double>(), 320, 1e-6);
}

// A violation whose time went into the server's intake (a slow body, a parse backlog: the
// stages the clock gained at arrival) is attributed to it by name.
TEST(Verdict, IntakeViolationNamesTheStage) {
  RunRecord r = run_of(base_workload(), 600, [](int i) { return i % 20 ? 20.0 : 400.0; });
  for (size_t i = 0; i < r.observed.size(); i += 20)
    r.observed[i].mmrt["stages_ms"] =
        json{{"http_read", 30}, {"intake", 330}, {"prefill", 40}, {"decode", 20}};
  const json res = evaluate(r);
  EXPECT_EQ(res["verdict"], "FAIL");
  EXPECT_EQ(res["attribution"]["dominant"], "intake");
  EXPECT_NEAR(res["attribution"]["violating"]["stages_ms"]["intake"].get<double>(), 330, 1e-6);
  EXPECT_NEAR(res["attribution"]["violating"]["stages_ms"]["http_read"].get<double>(), 30, 1e-6);
}

TEST(Verdict, TooFewSamplesIsInvalid) {
  const json res = evaluate(run_of(base_workload(), 100, [](int) { return 20.0; }));
  EXPECT_EQ(res["verdict"], "INVALID");
  EXPECT_EQ(res["exit_code"], 2);
  const std::string msg = res["reasons"][0]["message"];
  EXPECT_NE(msg.find("needs >= 299 samples; the run had 100"), std::string::npos) << msg;
}

TEST(Verdict, RefusalsAreViolationsUnlessAccepted) {
  Workload w = base_workload();
  RunRecord r = run_of(w, 600, [](int) { return 20.0; });
  for (int i = 0; i < 600; i += 50) {
    r.observed[i] = Observed{};
    r.observed[i].status = Status::kRefused;
    r.observed[i].scheduled_ns = r.observed[i].sent_ns = static_cast<int64_t>(i * 0.1e9);
    r.observed[i].done_ns = r.observed[i].scheduled_ns + kMs;
    r.observed[i].error = "predicted TTFT over budget";
  }
  json res = evaluate(r);
  EXPECT_EQ(res["verdict"], "FAIL");
  EXPECT_EQ((*class_of(res, "gold"))["refused"], 12);
  EXPECT_EQ(res["attribution"]["dominant"], "admission refusal");
  r.workload.classes[0].refusals_ok = true;
  res = evaluate(r);
  EXPECT_EQ(res["verdict"], "PASS") << res["reasons"].dump(1);
  EXPECT_EQ((*class_of(res, "gold"))["rules"][0]["samples"], 588);
}

TEST(Verdict, KConsecutiveMissesInAFrameStreamFail) {
  Workload w = base_workload();
  w.rate = 0;
  w.requests.clear();
  w.classes = {{.name = "platinum", .ttft = {.p50 = 100}}};
  w.streams = {{.name = "cam0", .fps = 10, .sla_class = "platinum"}};
  w.k = 3;
  auto frames = [&](std::vector<int> stalled) {
    RunRecord r;
    r.workload = w;
    for (int i = 0; i < 200; ++i) {
      Planned p;
      p.t_s = i * 0.1;
      p.kind = "frame";
      p.stream = "cam0";
      p.frame = i;
      p.sla_class = "platinum";
      r.plan.push_back(p);
      const bool stall = std::find(stalled.begin(), stalled.end(), i) != stalled.end();
      r.observed.push_back(
          ok(static_cast<int64_t>(p.t_s * 1e9), stall ? 600 : 30, stall ? 620 : 50));
    }
    return evaluate(r);
  };
  // Two isolated misses: the P50 claim holds and no streak reaches 3.
  json res = frames({20, 90});
  EXPECT_EQ(res["verdict"], "PASS") << res["reasons"].dump(1);
  EXPECT_EQ(res["streaks"][0]["longest"], 1);
  // A 0.4 s stall: frames 100..103 all late.
  res = frames({100, 101, 102, 103});
  EXPECT_EQ(res["verdict"], "FAIL");
  EXPECT_EQ(res["streaks"][0]["longest"], 4);
  EXPECT_EQ(res["streaks"][0]["status"], "fail");
  EXPECT_NEAR(res["streaks"][0]["at_s"].get<double>(), 10.0, 1e-9);
  EXPECT_EQ(res["reasons"][0]["rule"], "cam0: fewer than 3 consecutive misses");
}

TEST(Verdict, JitterNeedsGapsAndFailsOverItsBound) {
  Workload w = base_workload();
  w.classes[0].itl_jitter_ms = 5;
  // 600 requests of 4 chunks: 1,800 even gaps (20 ms over 4 chunks), no jitter.
  json res = evaluate(run_of(w, 600, [](int) { return 20.0; }));
  EXPECT_EQ(res["verdict"], "PASS") << res["reasons"].dump(1);
  // One chunk each: no gap at all, so the bound cannot be claimed.
  RunRecord one = run_of(w, 600, [](int) { return 20.0; });
  for (auto& o : one.observed) o.chunk_ns.resize(1);
  res = evaluate(one);
  EXPECT_EQ(res["verdict"], "INVALID");
  EXPECT_NE(res["reasons"][0]["message"].get<std::string>().find("needs >= 100 inter-token gaps"),
            std::string::npos);
  // Every 10th request's tokens come 40 ms apart instead of 5: P99 - P50 = 35 ms.
  RunRecord slow = run_of(w, 600, [](int) { return 20.0; });
  for (size_t i = 0; i < slow.observed.size(); i += 10) {
    auto& c = slow.observed[i].chunk_ns;
    for (size_t k = 1; k < c.size(); ++k) c[k] = c[0] + static_cast<int64_t>(k) * 40 * kMs;
    slow.observed[i].done_ns = c.back() + kMs;
  }
  res = evaluate(slow);
  EXPECT_EQ(res["verdict"], "FAIL");
  EXPECT_EQ(res["reasons"][0]["rule"], "gold: itl jitter (p99 - p50) <= 5.0 ms");
}

TEST(Verdict, GeneratorLagIsInvalidEvenWhenRulesFail) {
  RunRecord r = run_of(base_workload(), 600, [](int i) { return i % 20 ? 20.0 : 400.0; });
  for (auto& o : r.observed) o.sent_ns = o.scheduled_ns + 50 * kMs;
  const json res = evaluate(r);
  EXPECT_EQ(res["verdict"], "INVALID");
  EXPECT_FALSE(res["generator"]["ok"].get<bool>());
  EXPECT_NE(res["reasons"][0]["rule"].get<std::string>().find("generator lag"), std::string::npos);
}

TEST(Verdict, ThrottlingAndStrictPreflightAreInvalid) {
  RunRecord r = run_of(base_workload(), 600, [](int) { return 20.0; });
  r.telemetry = json::array({{{"t_s", 0}, {"throttle", 10}}, {{"t_s", 1}, {"throttle", 12}}});
  EXPECT_EQ(evaluate(r)["verdict"], "INVALID");
  r.telemetry = json::array();
  r.strict_failures = {"governor"};
  const json res = evaluate(r);
  EXPECT_EQ(res["verdict"], "INVALID");
  EXPECT_EQ(res["reasons"][0]["rule"], "preflight (strict): governor");
}

TEST(Verdict, NoSteadyStateIsInvalid) {
  // The second half is three times slower (but within budget).
  const json res =
      evaluate(run_of(base_workload(), 1000, [](int i) { return i < 500 ? 20.0 : 60.0; }));
  EXPECT_EQ(res["verdict"], "INVALID");
  EXPECT_FALSE(res["drift"]["steady"].get<bool>());
  EXPECT_NEAR(res["drift"]["ttft_p50_ratio"].get<double>(), 3.0, 1e-9);
}

TEST(Baseline, DeltasOverToleranceFailAndFingerprintDiffsAreListed) {
  RunRecord lab = run_of(base_workload(), 600, [](int) { return 20.0; });
  lab.fingerprint = {{"governor", "performance"}, {"kernel", "6.1"}, {"hostname", "lab"}};
  const json lab_res = evaluate(lab);
  const json b = make_baseline(lab_res);
  EXPECT_NO_THROW(check_baseline(b, "lab.json"));
  EXPECT_THROW(check_baseline(json{{"x", 1}}, "lab.json"), std::exception);

  RunRecord here = run_of(base_workload(), 600, [](int) { return 30.0; });
  here.fingerprint = {{"governor", "powersave"}, {"kernel", "6.1"}, {"hostname", "prod"}};
  here.baseline = b;
  here.baseline_file = "lab.json";
  const json res = evaluate(here);
  EXPECT_EQ(res["verdict"], "FAIL");
  bool ttft_p99 = false;
  for (const auto& row : res["baseline"]["rows"])
    if (row["class"] == "gold" && row["metric"] == "ttft" && row["stat"] == "p99") {
      ttft_p99 = true;
      EXPECT_EQ(row["status"], "fail");
      EXPECT_NEAR(row["delta_pct"].get<double>(), 50, 1.5);
    }
  EXPECT_TRUE(ttft_p99);
  ASSERT_EQ(res["baseline"]["fingerprint_diffs"].size(), 1u);
  EXPECT_EQ(res["baseline"]["fingerprint_diffs"][0]["key"], "governor");
  // The same run against its own baseline passes.
  lab.baseline = b;
  EXPECT_EQ(evaluate(lab)["verdict"], "PASS");
}

}  // namespace
}  // namespace mmrt::verify
