#include "verify/baseline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "verify/stats.h"

namespace mmrt::verify {
namespace {

using nlohmann::json;

constexpr double kMinDeltaMs = 1.0;
const char* const kMetrics[] = {"ttft_ms", "tpot_ms", "e2e_ms", "itl_ms"};

// Keys whose difference is noise, not a cause.
bool volatile_key(const std::string& k) {
  return k == "hostname" || k == "mmrt_version";
}

}  // namespace

nlohmann::json make_baseline(const nlohmann::json& result) {
  return {{"mmrt_verify_baseline", 1},
          {"generated_at", result.value("generated_at", "")},
          {"workload", result.value("workload", json::object())},
          {"fingerprint", result.value("fingerprint", json::object())},
          {"histograms", result.value("histograms", json::object())}};
}

void check_baseline(const nlohmann::json& b, const std::string& origin) {
  if (!b.is_object() || b.value("mmrt_verify_baseline", 0) != 1)
    throw FormatError(origin + ": not a baseline (written by mmrt verify --save-baseline)");
  if (!b.contains("histograms") || !b["histograms"].is_object() || !b.contains("fingerprint") ||
      !b["fingerprint"].is_object())
    throw FormatError(origin + ": a baseline needs \"histograms\" and \"fingerprint\" objects");
  for (const auto& [cls, m] : b["histograms"].items()) {
    if (!m.is_object()) throw FormatError(origin + ": histograms." + cls + " must be an object");
    for (const auto& [metric, h] : m.items()) {
      try {
        LogHistogram::from_json(h);
      } catch (const Error& e) {
        throw FormatError(origin + ": histograms." + cls + "." + metric + ": " + e.what());
      }
    }
  }
}

nlohmann::json compare_baseline(const nlohmann::json& lab, const nlohmann::json& histograms,
                                const nlohmann::json& fingerprint, double tolerance_pct) {
  json rows = json::array();
  const json& labh = lab["histograms"];
  for (const auto& [cls, here_m] : histograms.items()) {
    if (!labh.contains(cls)) continue;
    for (const char* metric : kMetrics) {
      if (!here_m.contains(metric) || !labh[cls].contains(metric)) continue;
      const LogHistogram a = LogHistogram::from_json(labh[cls][metric]);
      const LogHistogram b = LogHistogram::from_json(here_m[metric]);
      if (a.count() == 0 || b.count() == 0) continue;
      auto row = [&](const char* stat, double l, double h, bool judged) {
        const double d = h - l;
        // A lab value of 0 (every token in one chunk) counts as 1 us, so a real rise still shows.
        const double pct = d / std::max(l, 1e-3) * 100;
        const bool fail = judged && pct > tolerance_pct && d > kMinDeltaMs;
        rows.push_back({{"class", cls},
                        {"metric", std::string(metric).substr(0, std::string(metric).size() - 3)},
                        {"stat", stat},
                        {"lab_ms", round3(l)},
                        {"here_ms", round3(h)},
                        {"delta_ms", round3(d)},
                        {"delta_pct", round3(pct)},
                        {"tolerance_pct", judged ? json(tolerance_pct) : json(nullptr)},
                        {"lab_n", a.count()},
                        {"here_n", b.count()},
                        {"status", !judged ? "info"
                                   : fail  ? "fail"
                                           : "pass"}});
      };
      row("p50", a.quantile(0.5), b.quantile(0.5), true);
      row("p99", a.quantile(0.99), b.quantile(0.99), true);
      row("max", a.max(), b.max(), false);
      if (std::string(metric) == "itl_ms")
        row("jitter", a.quantile(0.99) - a.quantile(0.5), b.quantile(0.99) - b.quantile(0.5), true);
    }
  }
  json diffs = json::array();
  const json& lf = lab["fingerprint"];
  for (const auto& [k, v] : fingerprint.items()) {
    if (volatile_key(k)) continue;
    const json lv = lf.contains(k) ? lf[k] : json(nullptr);
    if (lv != v) diffs.push_back({{"key", k}, {"lab", lv}, {"here", v}});
  }
  for (const auto& [k, v] : lf.items())
    if (!fingerprint.contains(k) && !volatile_key(k))
      diffs.push_back({{"key", k}, {"lab", v}, {"here", nullptr}});
  return {{"lab_generated_at", lab.value("generated_at", "")},
          {"rows", rows},
          {"fingerprint_diffs", diffs}};
}

std::string baseline_failure(const nlohmann::json& comparison) {
  int failing = 0;
  const json* worst = nullptr;
  const json& rows = comparison["rows"];
  for (const auto& row : rows)
    if (row["status"] == "fail") {
      ++failing;
      if (!worst || row["delta_pct"].get<double>() > (*worst)["delta_pct"].get<double>())
        worst = &row;
    }
  if (!worst) return "";
  const json& x = *worst;
  const size_t diffs = comparison["fingerprint_diffs"].size();
  return std::to_string(failing) + " of " + std::to_string(rows.size()) +
         " rows worse than the baseline; the worst: " + x["class"].get<std::string>() + " " +
         x["metric"].get<std::string>() + " " + x["stat"].get<std::string>() + " " +
         format_ms(x["here_ms"].get<double>()) + " here vs " +
         format_ms(x["lab_ms"].get<double>()) + " in the lab (+" +
         std::to_string(static_cast<int64_t>(x["delta_pct"].get<double>())) + " %)" +
         (diffs ? "; the machines differ in " + std::to_string(diffs) +
                      " settings (see the baseline table)"
                : std::string());
}

}  // namespace mmrt::verify
