// Lab vs production: a saved run (histograms per class and metric, summaries, the machine's
// fingerprint) and the field report's comparison table against it (P50 / P99 / max / jitter, lab
// vs here, deltas against a tolerance), with the fingerprint differences as the likely causes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mmrt::verify {

// The baseline of a verify result: {"mmrt_verify_baseline": 1, "generated_at", "workload",
// "fingerprint", "histograms": {class: {metric: LogHistogram}}}.
nlohmann::json make_baseline(const nlohmann::json& result);
// FormatError naming `origin` unless `b` has make_baseline's shape.
void check_baseline(const nlohmann::json& b, const std::string& origin);
// Rows for every class and metric (ttft, tpot, e2e, itl) both runs have: p50, p99 and, for itl,
// jitter (p99 - p50) are judged (worse by more than tolerance_pct and by more than 1 ms: "fail");
// max is shown only ("info": one sample decides it). Plus the fingerprint keys that differ.
nlohmann::json compare_baseline(const nlohmann::json& lab, const nlohmann::json& histograms,
                                const nlohmann::json& fingerprint, double tolerance_pct);

// One sentence for a comparison with failing rows: how many rows are worse than the tolerance,
// the worst of them, and how many fingerprint keys differ; empty when no row fails.
std::string baseline_failure(const nlohmann::json& comparison);

}  // namespace mmrt::verify
