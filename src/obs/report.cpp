#include "obs/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace mmrt::obs {

using engine::Event;
using engine::Outcome;

double percentile_sorted(const std::vector<double>& v, double p) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  double rank = std::ceil(p / 100.0 * static_cast<double>(v.size()));
  size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(v.size()))) - 1;
  return v[i];
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return percentile_sorted(v, p);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

Dist Dist::of(const std::vector<double>& v) {
  Dist d;
  d.n = static_cast<int64_t>(v.size());
  if (v.empty()) return d;
  d.p50 = percentile(v, 50);
  d.p95 = percentile(v, 95);
  d.p99 = percentile(v, 99);
  double s = 0;
  for (double x : v) s += x;
  d.mean = s / static_cast<double>(v.size());
  d.max = *std::max_element(v.begin(), v.end());
  return d;
}

nlohmann::json Dist::json() const {
  return {{"n", n}, {"p50", p50}, {"p95", p95}, {"p99", p99}, {"mean", mean}, {"max", max}};
}

RequestTimes request_times(const engine::RequestResult& r, const ServedStamps& served) {
  RequestTimes t;
  const bool ok = r.outcome == Outcome::kFinished || r.outcome == Outcome::kStopped;
  const auto& tl = r.timeline;
  const int64_t t0 = tl.origin(), tr = tl.first(Event::kReceived),
                tf = tl.first(Event::kFirstToken), te = tl.last(Event::kFinished);
  if (!ok || tf < 0 || t0 < 0 || tr < 0 || te < 0) return t;
  auto s = [](int64_t ns) { return static_cast<double>(ns) * 1e-9; };
  t.completed = true;
  t.ttft = s(tf - t0);
  if (served.first_byte_ns > 0) {
    t.ttft = s(served.first_byte_ns - t0);
    t.write = s(std::max<int64_t>(0, served.first_byte_ns - tf));
  }
  t.e2e = s(te - t0);
  t.tpot = r.tokens.size() > 1 ? s(te - tf) / static_cast<double>(r.tokens.size() - 1) : 0;
  const int64_t tm = tl.first(Event::kMediaDecoded), tq = tl.first(Event::kQueued),
                ts = tl.first(Event::kScheduled);
  int64_t es = -1;
  for (const auto& e : tl.entries()) {
    if (e.event == Event::kEncoderStart) es = e.t_ns;
    if (e.event == Event::kEncoderEnd && es >= 0) t.encode += s(e.t_ns - es);
  }
  const int64_t tread = tl.first(Event::kRequestRead);
  t.http_read = tread >= t0 ? s(tread - t0) : 0;
  t.intake = std::max(0.0, s(tr - t0) - t.http_read - served.download_s);
  t.media = tm > 0 ? s(tm - tr) : 0;
  t.media_decode = std::min(t.media, s(r.media_decode_ns));
  t.media_resample = std::min(t.media - t.media_decode, s(r.media_resample_ns));
  t.preprocess = t.media - t.media_decode - t.media_resample;
  t.queue = ts > 0 && tq > 0 ? s(ts - tq) : 0;
  t.prefill = ts > 0 ? std::max(0.0, s(tf - ts) - t.encode) : 0;
  t.decode = s(te - tf);
  return t;
}

Report make_report(const std::string& policy, double duration_s,
                   const std::vector<engine::RequestResult>& results,
                   const std::vector<std::string>& requested, const engine::SlaConfig& sla,
                   const engine::EngineStats& stats) {
  Report rep;
  rep.policy = policy;
  rep.duration_s = duration_s;
  rep.engine = stats;
  std::vector<std::string> names;
  for (const auto& c : sla.classes) names.push_back(c.name);
  names.push_back("all");
  std::map<std::string, std::vector<double>> ttft, tpot, e2e, itl;
  std::map<std::string, ClassReport> by;
  for (const auto& n : names) by[n].name = n;
  StageBreakdown st;
  int64_t n_done = 0, met_all = 0, tokens = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const std::string& cls = requested[i];
    const engine::SlaClass* want = sla.index_of(cls) >= 0 ? &sla.get(cls) : nullptr;
    for (const std::string& key : {cls, std::string("all")}) {
      ClassReport& c = by[key];
      c.name = key;
      ++c.requests;
      c.refused += r.outcome == Outcome::kRefused;
      // Refused after it entered the queue: admitted, then found unable to meet its class.
      c.refused_late += r.outcome == Outcome::kRefused && r.timeline.count(Event::kQueued) > 0;
      // ... and of those, the ones whose encoder had run: work spent for nothing.
      c.refused_after_encode +=
          r.outcome == Outcome::kRefused && r.timeline.count(Event::kEncoderEnd) > 0;
      c.failed += r.outcome == Outcome::kFailed;
      c.cancelled += r.outcome == Outcome::kCancelled;
      c.downgraded += r.sla_class != cls && r.outcome != Outcome::kRefused;
    }
    tokens += static_cast<int64_t>(r.tokens.size());
    const RequestTimes t = request_times(r);
    if (!t.completed) continue;
    const double t_ttft = t.ttft * 1e3, t_e2e = t.e2e * 1e3, t_tpot = t.tpot * 1e3;
    bool met =
        !want || ((want->ttft_ns == 0 || t_ttft * 1e6 <= static_cast<double>(want->ttft_ns)) &&
                  (want->tpot_ns == 0 || r.tokens.size() <= 1 ||
                   t_tpot * 1e6 <= static_cast<double>(want->tpot_ns)));
    for (const std::string& key : {cls, std::string("all")}) {
      ClassReport& c = by[key];
      ++c.completed;
      c.slo_met += met;
      ttft[key].push_back(t_ttft);
      e2e[key].push_back(t_e2e);
      if (r.tokens.size() > 1) tpot[key].push_back(t_tpot);
      int64_t prev = -1;
      for (const engine::TimelineEntry& e : r.timeline.entries()) {
        if (e.event != Event::kFirstToken && e.event != Event::kToken) continue;
        if (prev >= 0) itl[key].push_back(static_cast<double>(e.t_ns - prev) * 1e-6);
        prev = e.t_ns;
      }
    }
    met_all += met;
    st.http_read += t.http_read * 1e3;
    st.intake += t.intake * 1e3;
    st.media += t.media * 1e3;
    st.queue += t.queue * 1e3;
    st.encode += t.encode * 1e3;
    st.prefill += t.prefill * 1e3;
    st.decode += t.decode * 1e3;
    ++n_done;
  }
  if (n_done) {
    st.http_read /= static_cast<double>(n_done);
    st.intake /= static_cast<double>(n_done);
    st.media /= static_cast<double>(n_done);
    st.queue /= static_cast<double>(n_done);
    st.encode /= static_cast<double>(n_done);
    st.prefill /= static_cast<double>(n_done);
    st.decode /= static_cast<double>(n_done);
  }
  rep.stages = st;
  for (const auto& n : names) {
    ClassReport c = by[n];
    c.ttft_ms = Dist::of(ttft[n]);
    c.tpot_ms = Dist::of(tpot[n]);
    c.e2e_ms = Dist::of(e2e[n]);
    c.itl_ms = Dist::of(itl[n]);
    rep.classes.push_back(c);
  }
  rep.goodput_rps = duration_s > 0 ? static_cast<double>(met_all) / duration_s : 0;
  rep.throughput_tok_s = duration_s > 0 ? static_cast<double>(tokens) / duration_s : 0;
  rep.prefix_hit_rate = stats.prefix_query_tokens
                            ? static_cast<double>(stats.prefix_hit_tokens) /
                                  static_cast<double>(stats.prefix_query_tokens)
                            : 0;
  int64_t eq = stats.encoder_hits + stats.encoder_misses;
  rep.encoder_hit_rate = eq ? static_cast<double>(stats.encoder_hits) / static_cast<double>(eq) : 0;
  return rep;
}

nlohmann::json Report::json() const {
  nlohmann::json j;
  j["policy"] = policy;
  j["duration_s"] = duration_s;
  j["goodput_rps"] = goodput_rps;
  j["throughput_tok_s"] = throughput_tok_s;
  j["prefix_cache_hit_rate"] = prefix_hit_rate;
  j["encoder_cache_hit_rate"] = encoder_hit_rate;
  j["stages_ms"] = {{"http_read", stages.http_read}, {"intake", stages.intake},
                    {"media", stages.media},         {"queue", stages.queue},
                    {"encode", stages.encode},       {"prefill", stages.prefill},
                    {"decode", stages.decode}};
  nlohmann::json cls = nlohmann::json::object();
  for (const auto& c : classes) {
    cls[c.name] = {{"requests", c.requests},
                   {"completed", c.completed},
                   {"refused", c.refused},
                   {"refused_late", c.refused_late},
                   {"refused_after_encode", c.refused_after_encode},
                   {"failed", c.failed},
                   {"cancelled", c.cancelled},
                   {"downgraded", c.downgraded},
                   {"slo_met", c.slo_met},
                   {"slo_attainment", c.attainment()},
                   {"ttft_ms", c.ttft_ms.json()},
                   {"tpot_ms", c.tpot_ms.json()},
                   {"itl_ms", c.itl_ms.json()},
                   {"e2e_ms", c.e2e_ms.json()}};
  }
  j["classes"] = cls;
  const auto& e = engine;
  j["engine"] = {{"steps", e.steps},
                 {"preemptions", e.preemptions},
                 {"refused", e.refused},
                 {"refused_late", e.refused_late},
                 {"refused_after_encode", e.refused_after_encode},
                 {"downgraded", e.downgraded},
                 {"downgraded_late", e.downgraded_late},
                 {"displacing", e.displacing},
                 {"tpot_misses", e.tpot_misses},
                 {"encoder_runs", e.encoder_runs},
                 {"ttft_prediction",
                  {{"count", e.ttft_prediction.count},
                   {"mean_abs_rel_error", e.ttft_prediction.mean_abs_rel},
                   {"p50_abs_rel_error", e.ttft_prediction.p50_abs_rel},
                   {"p90_abs_rel_error", e.ttft_prediction.p90_abs_rel},
                   {"mean_signed_rel_error", e.ttft_prediction.mean_signed_rel}}},
                 {"cost_model_ns",
                  {{"per_step", e.cost_coefficients_ns[0]},
                   {"per_prefill_token", e.cost_coefficients_ns[1]},
                   {"per_decode_token", e.cost_coefficients_ns[2]},
                   {"per_encoder_patch", e.cost_coefficients_ns[3]},
                   {"per_context_token", e.cost_coefficients_ns[4]}}}};
  return j;
}

std::string Report::text() const {
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "policy %s: goodput %.2f req/s, %.1f tok/s, prefix-cache hit %.0f%%, encoder-cache "
                "hit %.0f%%\n",
                policy.c_str(), goodput_rps, throughput_tok_s, 100 * prefix_hit_rate,
                100 * encoder_hit_rate);
  out += buf;
  std::snprintf(buf, sizeof buf, "  %-9s %5s %5s %5s %5s %6s | %27s | %20s | %20s\n", "class",
                "reqs", "done", "refus", "late", "SLO%", "TTFT ms p50 / p95 / p99",
                "TPOT ms p50 / p99", "E2E ms p50 / p99");
  out += buf;
  for (const auto& c : classes) {
    std::snprintf(buf, sizeof buf,
                  "  %-9s %5lld %5lld %5lld %5lld %5.1f%% | %8.0f / %7.0f / %7.0f | %9.1f / %8.1f "
                  "| %9.0f / %8.0f\n",
                  c.name.c_str(), static_cast<long long>(c.requests),
                  static_cast<long long>(c.completed), static_cast<long long>(c.refused),
                  static_cast<long long>(c.refused_late), 100 * c.attainment(), c.ttft_ms.p50,
                  c.ttft_ms.p95, c.ttft_ms.p99, c.tpot_ms.p50, c.tpot_ms.p99, c.e2e_ms.p50,
                  c.e2e_ms.p99);
    out += buf;
  }
  std::string gaps;
  for (const auto& c : classes) {
    if (c.itl_ms.n == 0 || c.name == "all") continue;
    std::snprintf(buf, sizeof buf, "%s %s %.1f / %.1f / %.1f", gaps.empty() ? "" : ",",
                  c.name.c_str(), c.itl_ms.p50, c.itl_ms.p99, c.itl_ms.max);
    gaps += buf;
  }
  if (!gaps.empty()) out += "  inter-token gaps ms (p50 / p99 / max):" + gaps + "\n";
  std::snprintf(
      buf, sizeof buf,
      "  stages (mean ms per completed request): http_read %.1f, intake %.1f, media %.1f, queue "
      "%.1f, encode %.1f, prefill "
      "%.1f, decode %.1f\n"
      "  TTFT prediction: %lld checked, mean |error| %.0f%%, p90 %.0f%%; %lld preemptions, %lld "
      "downgraded; "
      "late (before the first token): %lld refused (%lld after their encoder ran), %lld "
      "downgraded\n",
      stages.http_read, stages.intake, stages.media, stages.queue, stages.encode, stages.prefill,
      stages.decode, static_cast<long long>(engine.ttft_prediction.count),
      100 * engine.ttft_prediction.mean_abs_rel, 100 * engine.ttft_prediction.p90_abs_rel,
      static_cast<long long>(engine.preemptions), static_cast<long long>(engine.downgraded),
      static_cast<long long>(engine.refused_late),
      static_cast<long long>(engine.refused_after_encode),
      static_cast<long long>(engine.downgraded_late));
  out += buf;
  return out;
}

}  // namespace mmrt::obs
