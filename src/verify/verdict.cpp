#include "verify/verdict.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <optional>

#include "core/error.h"
#include "obs/report.h"
#include "verify/baseline.h"
#include "verify/stats.h"

namespace mmrt::verify {
namespace {

using nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr size_t kMinJitterGaps = 100;  // a P99 of fewer gaps is its maximum
const char* const kStages[] = {"http_read",      "intake",        "media_download", "media_decode",
                               "media_resample", "preprocessing", "queue",          "encoder",
                               "prefill",        "write",         "decode"};

std::string fmt_s(double s) {
  char b[48];
  std::snprintf(b, sizeof b, "%.2f s", s);
  return b;
}
std::string pct(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}
json num_or_null(const std::optional<double>& v) {
  return v ? json(round3(*v)) : json(nullptr);
}

struct Judged {
  const Planned* p = nullptr;
  const Observed* o = nullptr;
  std::string cls;
  std::optional<double> ttft, e2e, tpot;
  std::vector<double> gaps;
  double lag = 0;
  bool violated = false, excused = false;  // excused: a refusal the class accepts
  std::string why;
  std::string
      metric;   // the budget it broke first: "ttft", "tpot" or "e2e" (empty: none, or a failure)
  json stages;  // null when the server sent none
};

struct Reason {
  std::string kind, rule, message;
};

const ClassRules* rules_of(const Workload& w, const std::string& cls) {
  for (const auto& c : w.classes)
    if (c.name == cls) return &c;
  return nullptr;
}

std::string class_name(const Planned& p) {
  return p.sla_class.empty() ? "default" : p.sla_class;
}

// The budget of one metric for a request: its class's, else the overall rules'.
std::optional<double> budget(const Workload& w, const std::string& cls,
                             Thresholds ClassRules::*metric) {
  if (const ClassRules* r = rules_of(w, cls); r && (r->*metric).budget())
    return (r->*metric).budget();
  if (w.overall) return ((*w.overall).*metric).budget();
  return std::nullopt;
}

std::vector<Judged> judge_requests(const RunRecord& run) {
  const Workload& w = run.workload;
  std::vector<Judged> out(run.plan.size());
  for (size_t i = 0; i < run.plan.size(); ++i) {
    Judged& j = out[i];
    j.p = &run.plan[i];
    j.o = &run.observed[i];
    j.cls = class_name(*j.p);
    const Observed& o = *j.o;
    const double ms = 1e-6;
    j.lag = static_cast<double>(o.sent_ns - o.scheduled_ns) * ms;
    if (o.done_ns) j.e2e = static_cast<double>(o.done_ns - o.scheduled_ns) * ms;
    if (o.status == Status::kOk) {
      // The first token: the first content chunk (a stream whose tokens carried no text shows
      // it only at its end).
      const int64_t first = o.chunk_ns.empty() ? o.done_ns : o.chunk_ns.front();
      j.ttft = static_cast<double>(first - o.scheduled_ns) * ms;
      if (o.completion_tokens > 1 && o.chunk_ns.size() > 1)
        j.tpot = static_cast<double>(o.chunk_ns.back() - o.chunk_ns.front()) * ms /
                 static_cast<double>(o.completion_tokens - 1);
      for (size_t k = 1; k < o.chunk_ns.size(); ++k)
        j.gaps.push_back(static_cast<double>(o.chunk_ns[k] - o.chunk_ns[k - 1]) * ms);
      if (o.mmrt.is_object() && o.mmrt.contains("stages_ms")) j.stages = o.mmrt["stages_ms"];
    }
    const ClassRules* r = rules_of(w, j.cls);
    if (o.status == Status::kRefused && r && r->refusals_ok) {
      j.excused = true;
      continue;
    }
    if (o.status != Status::kOk) {
      j.violated = true;
      j.why =
          std::string(to_string(o.status)) + (o.error.empty() ? "" : ": " + o.error.substr(0, 200));
      continue;
    }
    auto check = [&](const char* what, const std::optional<double>& v,
                     Thresholds ClassRules::*metric) {
      const auto b = budget(w, j.cls, metric);
      if (v && b && *v > *b && j.why.empty()) {
        j.violated = true;
        j.metric = what;
        j.why = std::string(what) + " " + format_ms(*v) + " > " + format_ms(*b);
      }
    };
    check("ttft", j.ttft, &ClassRules::ttft);
    check("tpot", j.tpot, &ClassRules::tpot);
    check("e2e", j.e2e, &ClassRules::e2e);
  }
  return out;
}

// One percentile claim: failed requests count as over budget (and as +inf for the quantile).
json claim_json(const std::string& cls, const char* metric, const char* stat, double q,
                double threshold, const std::vector<double>& values, double confidence,
                std::vector<Reason>& reasons) {
  const int64_t n = static_cast<int64_t>(values.size());
  const int64_t over =
      std::count_if(values.begin(), values.end(), [&](double v) { return v > threshold; });
  const double observed = n ? obs::percentile(values, q * 100) : kInf;
  const Claim c = judge_claim(n, over, q, confidence);
  const std::string rule = std::string(metric) + " " + stat + " <= " + format_ms(threshold);
  std::string msg;
  const int64_t allowed = over_allowed_by_rank(n, q);
  if (c.status == ClaimStatus::kFail) {
    msg = std::string(stat) + " " + metric + " " +
          (std::isfinite(observed) ? format_ms(observed) : std::string("unbounded (failures)")) +
          " > " + format_ms(threshold) +
          (std::isfinite(observed) ? " (by " + format_ms(observed - threshold) + ")" : "") + "; " +
          std::to_string(over) + " of " + std::to_string(n) + " over budget, at most " +
          std::to_string(allowed) + " allowed";
    reasons.push_back({"fail", cls + ": " + rule, msg});
  } else if (c.status == ClaimStatus::kInsufficient) {
    msg = "a " + std::string(stat) + " claim at " + pct(confidence * 100) + " % confidence with " +
          std::to_string(over) + " over budget needs >= " + std::to_string(c.needed) +
          " samples; the run had " + std::to_string(n);
    reasons.push_back({"invalid", cls + ": " + rule, msg});
  } else {
    msg = std::to_string(over) + " of " + std::to_string(n) +
          " over budget; the claim needs >= " + std::to_string(c.needed) + " samples";
  }
  return {{"rule", rule},
          {"metric", metric},
          {"stat", stat},
          {"threshold_ms", threshold},
          {"observed_ms", std::isfinite(observed) ? json(round3(observed)) : json(nullptr)},
          {"samples", n},
          {"over", over},
          {"needed", c.needed},
          {"status", to_string(c.status)},
          {"message", msg}};
}

json class_block(const std::string& name, const std::vector<const Judged*>& m,
                 const ClassRules* rules, double confidence, std::vector<Reason>& reasons,
                 json& histograms) {
  json b = {{"name", name}};
  int64_t completed = 0, refused = 0, errors = 0, timeouts = 0, violations = 0;
  std::vector<double> ttft, tpot, e2e, itl;         // completed requests
  std::vector<double> ttft_all, tpot_all, e2e_all;  // failures as +inf
  LogHistogram h_ttft, h_tpot, h_e2e, h_itl;
  for (const Judged* j : m) {
    const Status s = j->o->status;
    completed += s == Status::kOk;
    refused += s == Status::kRefused;
    errors += s == Status::kError;
    timeouts += s == Status::kTimeout;
    violations += j->violated;
    if (j->excused) continue;
    const bool ok = s == Status::kOk;
    ttft_all.push_back(ok && j->ttft ? *j->ttft : kInf);
    e2e_all.push_back(ok && j->e2e ? *j->e2e : kInf);
    if (!ok || j->tpot) tpot_all.push_back(ok ? *j->tpot : kInf);
    if (!ok) continue;
    if (j->ttft) ttft.push_back(*j->ttft), h_ttft.add(*j->ttft);
    if (j->tpot) tpot.push_back(*j->tpot), h_tpot.add(*j->tpot);
    if (j->e2e) e2e.push_back(*j->e2e), h_e2e.add(*j->e2e);
    for (double g : j->gaps) itl.push_back(g), h_itl.add(g);
  }
  b["requests"] = m.size();
  b["completed"] = completed;
  b["refused"] = refused;
  b["errors"] = errors;
  b["timeouts"] = timeouts;
  b["violations"] = violations;
  b["ttft_ms"] = Summary::of(ttft).json();
  b["tpot_ms"] = Summary::of(tpot).json();
  b["itl_ms"] = Summary::of(itl).json();
  b["e2e_ms"] = Summary::of(e2e).json();
  histograms[name] = {{"ttft_ms", h_ttft.json()},
                      {"tpot_ms", h_tpot.json()},
                      {"e2e_ms", h_e2e.json()},
                      {"itl_ms", h_itl.json()}};
  json rl = json::array();
  if (rules) {
    auto claims = [&](const char* metric, const Thresholds& t, const std::vector<double>& v) {
      if (t.p50) rl.push_back(claim_json(name, metric, "p50", 0.5, *t.p50, v, confidence, reasons));
      if (t.p90) rl.push_back(claim_json(name, metric, "p90", 0.9, *t.p90, v, confidence, reasons));
      if (t.p99)
        rl.push_back(claim_json(name, metric, "p99", 0.99, *t.p99, v, confidence, reasons));
    };
    claims("ttft", rules->ttft, ttft_all);
    claims("tpot", rules->tpot, tpot_all);
    claims("e2e", rules->e2e, e2e_all);
    if (rules->itl_jitter_ms) {
      const double jit = itl.empty() ? 0 : obs::percentile(itl, 99) - obs::percentile(itl, 50);
      const bool few = itl.size() < kMinJitterGaps;
      const bool fail = !few && jit > *rules->itl_jitter_ms;
      const std::string rule = "itl jitter (p99 - p50) <= " + format_ms(*rules->itl_jitter_ms);
      const std::string msg = "inter-token p99 - p50 = " + format_ms(jit) + " over " +
                              std::to_string(itl.size()) + " gaps";
      if (fail)
        reasons.push_back(
            {"fail", name + ": " + rule, msg + " > " + format_ms(*rules->itl_jitter_ms)});
      if (few)
        reasons.push_back({"invalid", name + ": " + rule,
                           "a jitter bound needs >= " + std::to_string(kMinJitterGaps) +
                               " inter-token gaps; the run had " + std::to_string(itl.size())});
      rl.push_back({{"rule", rule},
                    {"metric", "itl"},
                    {"stat", "jitter"},
                    {"threshold_ms", *rules->itl_jitter_ms},
                    {"observed_ms", round3(jit)},
                    {"samples", itl.size()},
                    {"over", nullptr},
                    {"needed", nullptr},
                    {"status", few    ? "insufficient"
                               : fail ? "fail"
                                      : "pass"},
                    {"message", msg}});
    }
  }
  b["rules"] = rl;
  return b;
}

json streaks_json(const Workload& w, const std::vector<Judged>& js, std::vector<Reason>& reasons) {
  json out = json::array();
  for (const auto& f : w.streams) {
    int64_t frames = 0, run = 0, longest = 0;
    double run_start = 0, at = 0;
    for (const Judged& j : js) {
      if (j.p->stream != f.name || j.p->warmup) continue;
      ++frames;
      if (j.violated) {
        if (run++ == 0) run_start = j.p->t_s;
        if (run > longest) longest = run, at = run_start;
      } else {
        run = 0;
      }
    }
    const bool fail = longest >= w.k;
    if (fail)
      reasons.push_back(
          {"fail", f.name + ": fewer than " + std::to_string(w.k) + " consecutive misses",
           std::to_string(longest) + " consecutive frames over budget from t = " + fmt_s(at)});
    out.push_back({{"stream", f.name},
                   {"k", w.k},
                   {"frames", frames},
                   {"longest", longest},
                   {"at_s", longest ? json(round3(at)) : json(nullptr)},
                   {"status", fail ? "fail" : "pass"}});
  }
  return out;
}

// The stages a metric is made of: TTFT of everything before the first token, TPOT of decoding,
// end-to-end of all.
bool in_view(const std::string& view, const char* stage) {
  const std::string st = stage;
  if (view == "ttft") return st != "decode";
  if (view == "tpot") return st == "decode";
  return true;
}

// Mean ms per stage in `view`; "client" is what the server's stages do not cover (the network,
// the accept queue before the first byte is read, the client and its lag) of the view's metric.
json stage_means(const std::vector<const Judged*>& m, const std::string& view) {
  json s = json::object();
  for (const char* k : kStages)
    if (in_view(view, k)) s[k] = 0.0;
  s["client"] = 0.0;
  if (m.empty()) return s;
  for (const Judged* j : m) {
    double sum = 0;
    for (const char* k : kStages) {
      if (!in_view(view, k)) continue;
      const double v = j->stages.is_object() && j->stages.contains(k) && j->stages[k].is_number()
                           ? j->stages[k].get<double>()
                           : 0.0;
      s[k] = s[k].get<double>() + v;
      sum += v;
    }
    const double total = view == "ttft"   ? j->ttft.value_or(0)
                         : view == "tpot" ? 0.0
                                          : j->e2e.value_or(0);
    s["client"] = s["client"].get<double>() + std::max(0.0, total - sum);
  }
  for (auto& [k, v] : s.items()) v = round3(v.get<double>() / static_cast<double>(m.size()));
  return s;
}

json attribution_json(const std::vector<Judged>& js) {
  std::vector<const Judged*> bad, good;
  int64_t refused = 0, errors = 0, timeouts = 0;
  for (const Judged& j : js) {
    if (j.p->warmup || j.excused) continue;
    const Status s = j.o->status;
    refused += j.violated && s == Status::kRefused;
    errors += j.violated && s == Status::kError;
    timeouts += j.violated && s == Status::kTimeout;
    if (s != Status::kOk) continue;
    (j.violated ? bad : good).push_back(&j);
  }
  // One view for both bars: the metric most violations broke.
  std::map<std::string, int> broke;
  for (const Judged* j : bad) ++broke[j->metric];
  std::string view = "e2e";
  int most = 0;
  for (const auto& [k, n] : broke)
    if (n > most) most = n, view = k;
  json a = {{"view", view},
            {"violating", {{"n", bad.size()}, {"stages_ms", stage_means(bad, view)}}},
            {"passing", {{"n", good.size()}, {"stages_ms", stage_means(good, view)}}},
            {"refused", refused},
            {"errors", errors},
            {"timeouts", timeouts}};
  std::string dominant;
  double share = 0;
  const int64_t failures = refused + errors + timeouts;
  const int64_t all = failures + static_cast<int64_t>(bad.size());
  if (!bad.empty()) {
    double total = 0, top = -1;
    for (const auto& [k, v] : a["violating"]["stages_ms"].items()) {
      total += v.get<double>();
      if (v.get<double>() > top) top = v.get<double>(), dominant = k;
    }
    share = total > 0 ? top / total : 0;
  }
  // When most violations never got a timeline, the black hole is the refusal or failure itself.
  if (failures * 2 > all) {
    dominant = refused >= errors + timeouts ? "admission refusal"
               : timeouts >= errors         ? "timeout"
                                            : "error";
    share = all ? static_cast<double>(failures) / static_cast<double>(all) : 0;
  }
  a["dominant"] = dominant.empty() ? json(nullptr) : json(dominant);
  a["dominant_share"] = round3(share);
  return a;
}

json half_stats(const std::vector<const Judged*>& m) {
  std::vector<double> t, e;
  for (const Judged* j : m) {
    if (j->ttft) t.push_back(*j->ttft);
    if (j->e2e) e.push_back(*j->e2e);
  }
  auto p = [](const std::vector<double>& v, double q) {
    return v.empty() ? json(nullptr) : json(round3(obs::percentile(v, q)));
  };
  return {{"n", m.size()},
          {"ttft_p50_ms", p(t, 50)},
          {"ttft_p99_ms", p(t, 99)},
          {"e2e_p50_ms", p(e, 50)},
          {"e2e_p99_ms", p(e, 99)}};
}

json drift_json(const Workload& w, const std::vector<Judged>& js, std::vector<Reason>& reasons) {
  const double mid = (w.warmup_s + w.duration_s) / 2;
  std::vector<const Judged*> a, b;
  for (const Judged& j : js)
    if (!j.p->warmup && j.o->status == Status::kOk) (j.p->t_s < mid ? a : b).push_back(&j);
  json d = {
      {"split_s", round3(mid)}, {"first_half", half_stats(a)}, {"second_half", half_stats(b)}};
  bool steady = true;
  for (const auto& [k, rk] :
       {std::pair{"ttft_p50_ms", "ttft_p50_ratio"}, std::pair{"e2e_p50_ms", "e2e_p50_ratio"}}) {
    const json &x = d["first_half"][k], &y = d["second_half"][k];
    if (!x.is_number() || !y.is_number() || x.get<double>() <= 0) {
      d[rk] = nullptr;
      continue;
    }
    const double ratio = y.get<double>() / x.get<double>();
    d[rk] = round3(ratio);
    const double delta = std::fabs(y.get<double>() - x.get<double>());
    if ((ratio > w.steady_ratio || ratio < 1 / w.steady_ratio) && delta > w.steady_min_delta_ms) {
      steady = false;
      reasons.push_back({"invalid", "steady state",
                         std::string(k) + " moved from " + format_ms(x.get<double>()) +
                             " (first half) to " + format_ms(y.get<double>()) + " (second half)"});
    }
  }
  d["steady"] = steady;
  return d;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

}  // namespace

nlohmann::json evaluate(const RunRecord& run) {
  if (run.plan.size() != run.observed.size())
    throw InvalidArgument("evaluate: plan and observations differ in length");
  const Workload& w = run.workload;
  const std::vector<Judged> js = judge_requests(run);
  std::vector<Reason> invalid_now, fails, invalid_later;

  // Generator lag over every request sent (warm-up included: a lagging client is one anyway).
  std::vector<double> lags;
  for (const Judged& j : js) lags.push_back(j.lag);
  json gen = {{"limit_ms", w.max_lag_ms}};
  const double lag99 = lags.empty() ? 0 : obs::percentile(lags, 99);
  gen["lag_p50_ms"] = lags.empty() ? 0 : round3(obs::percentile(lags, 50));
  gen["lag_p99_ms"] = round3(lag99);
  gen["lag_max_ms"] = lags.empty() ? 0 : round3(*std::max_element(lags.begin(), lags.end()));
  gen["ok"] = lag99 <= w.max_lag_ms;
  if (lag99 > w.max_lag_ms)
    invalid_now.push_back({"invalid", "generator lag p99 <= " + format_ms(w.max_lag_ms),
                           "the load generator sent its requests late: p99 lag " +
                               format_ms(lag99) +
                               " (the client machine is too busy to measure this load)"});
  for (const auto& f : run.strict_failures)
    invalid_now.push_back({"invalid", "preflight (strict): " + f,
                           "required check '" + f + "' failed or could not be read"});
  // Throttling during the run.
  int64_t first = -1, last = -1;
  std::string gpu;
  for (const auto& s : run.telemetry) {
    const int64_t c = s.value("throttle", int64_t{-1});
    if (c >= 0 && first < 0) first = c;
    if (c >= 0) last = c;
    if (s.contains("gpu_reasons") && s["gpu_reasons"].is_string() &&
        !s["gpu_reasons"].get<std::string>().empty())
      gpu = s["gpu_reasons"].get<std::string>();
  }
  if (first >= 0 && last > first)
    invalid_now.push_back(
        {"invalid", "thermal throttle counters unchanged",
         "the CPU throttled " + std::to_string(last - first) + " times during the run"});
  if (!gpu.empty())
    invalid_now.push_back({"invalid", "no GPU clock slowdown", "the GPU reported: " + gpu});

  // Classes: the workload's, then any other the schedule used, then "all".
  std::vector<std::string> names;
  for (const auto& c : w.classes) names.push_back(c.name);
  for (const Judged& j : js)
    if (std::find(names.begin(), names.end(), j.cls) == names.end()) names.push_back(j.cls);
  json classes = json::array(), histograms = json::object(), thresholds = json::object();
  std::vector<const Judged*> all;
  for (const Judged& j : js)
    if (!j.p->warmup) all.push_back(&j);
  for (const auto& n : names) {
    std::vector<const Judged*> m;
    for (const Judged* j : all)
      if (j->cls == n) m.push_back(j);
    if (m.empty() && !rules_of(w, n)) continue;
    classes.push_back(class_block(n, m, rules_of(w, n), w.confidence, fails, histograms));
    json t = json::object();
    if (auto b = budget(w, n, &ClassRules::ttft)) t["ttft_p99_ms"] = *b;
    if (auto b = budget(w, n, &ClassRules::e2e)) t["e2e_p99_ms"] = *b;
    thresholds[n] = t;
  }
  classes.push_back(
      class_block("all", all, w.overall ? &*w.overall : nullptr, w.confidence, fails, histograms));
  // Claims lacking samples are invalid-later, not fails.
  std::vector<Reason> claim_fails;
  for (auto& r : fails) (r.kind == "fail" ? claim_fails : invalid_later).push_back(r);
  fails = claim_fails;
  json streaks = streaks_json(w, js, fails);
  json drift = drift_json(w, js, invalid_later);
  if (all.empty())
    invalid_now.push_back(
        {"invalid", "requests measured", "no request was scheduled after the warm-up"});

  json result = {{"mmrt_verify", 1}, {"generated_at", utc_now()}};
  json base = nullptr;
  if (!run.baseline.is_null()) {
    base = compare_baseline(run.baseline, histograms, run.fingerprint, w.baseline_tolerance_pct);
    base["file"] = run.baseline_file;
    const std::string why = baseline_failure(base);
    if (!why.empty())
      fails.push_back(
          {"fail", "baseline deltas within " + pct(w.baseline_tolerance_pct) + " %", why});
  }
  Outcome oc = !invalid_now.empty()     ? Outcome::kInvalid
               : !fails.empty()         ? Outcome::kFail
               : !invalid_later.empty() ? Outcome::kInvalid
                                        : Outcome::kPass;
  json reasons = json::array();
  for (const auto* list : {&invalid_now, &fails, &invalid_later})
    for (const auto& r : *list)
      reasons.push_back({{"kind", r.kind}, {"rule", r.rule}, {"message", r.message}});
  result["verdict"] = oc == Outcome::kPass ? "PASS" : oc == Outcome::kFail ? "FAIL" : "INVALID";
  result["exit_code"] = static_cast<int>(oc);
  result["reasons"] = reasons;
  result["run"] = {{"url", run.url},
                   {"workload", w.name},
                   {"seed", w.seed},
                   {"duration_s", w.duration_s},
                   {"warmup_s", w.warmup_s},
                   {"requests_scheduled", js.size()},
                   {"requests_measured", all.size()},
                   {"preflight", run.preflight_mode},
                   {"confidence", w.confidence},
                   {"k", w.k}};
  result["generator"] = gen;
  result["classes"] = classes;
  result["thresholds"] = thresholds;
  result["streaks"] = streaks;
  result["attribution"] = attribution_json(js);
  result["drift"] = drift;
  result["telemetry"] = run.telemetry;
  result["preflight"] = {{"mode", run.preflight_mode},
                         {"before", run.preflight_before},
                         {"after", run.preflight_after}};
  result["baseline"] = base;
  result["fingerprint"] = run.fingerprint;
  json reqs = json::array();
  for (size_t i = 0; i < js.size(); ++i) {
    const Judged& j = js[i];
    reqs.push_back(
        {{"i", i},
         {"t_s", round3(j.p->t_s)},
         {"class", j.cls},
         {"kind", j.p->kind},
         {"stream", j.p->stream},
         {"status", to_string(j.o->status)},
         {"warmup", j.p->warmup},
         {"ttft_ms", num_or_null(j.ttft)},
         {"e2e_ms", num_or_null(j.e2e)},
         {"tpot_ms", num_or_null(j.tpot)},
         {"prompt_tokens", j.o->prompt_tokens},
         {"tokens", j.o->completion_tokens},
         {"cached_tokens", j.o->cached_tokens},
         {"violated", j.violated},
         {"why", j.why},
         {"lag_ms", round3(j.lag)},
         {"request_id",
          j.o->mmrt.is_object() ? j.o->mmrt.value("request_id", json(nullptr)) : json(nullptr)},
         {"stages_ms", j.stages}});
  }
  result["requests"] = reqs;
  result["histograms"] = histograms;
  result["workload"] = workload_json(w);
  return result;
}

Outcome outcome_of(const nlohmann::json& result) {
  const std::string v = result.value("verdict", "INVALID");
  return v == "PASS" ? Outcome::kPass : v == "FAIL" ? Outcome::kFail : Outcome::kInvalid;
}

}  // namespace mmrt::verify
