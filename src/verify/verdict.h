// The verdict of a `mmrt verify` run: every request judged against its class's budgets, every
// percentile claim against the binomial bound, the k-consecutive rule per frame stream, the
// generator's lag, steady state and throttling, the baseline's deltas; and the attribution of the
// violations to the server's own stages. The result is one JSON document (docs/verify.md lists
// its fields) that the HTML report renders and `--save-baseline` keeps.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "verify/load.h"
#include "verify/workload.h"

namespace mmrt::verify {

enum class Outcome { kPass = 0, kFail = 1, kInvalid = 2 };  // the process exit codes

// Everything a run measured.
struct RunRecord {
  Workload workload;
  std::vector<Planned> plan;
  std::vector<Observed> observed;  // parallel to plan
  int64_t t0_ns = 0;               // the schedule's start (now_ns timeline)
  std::string url;
  std::string preflight_mode;  // strict | warn | off
  nlohmann::json preflight_before = nlohmann::json::array(),
                 preflight_after = nlohmann::json::array();
  std::vector<std::string> strict_failures;            // required checks failed (before or after)
  nlohmann::json telemetry = nlohmann::json::array();  // TelemetrySample rows
  nlohmann::json fingerprint = nlohmann::json::object();
  nlohmann::json baseline;  // null: none given
  std::string baseline_file;
};

// Judges the run. The result's "verdict" is INVALID when the measurement cannot be trusted
// (preflight failed in strict mode, the generator lagged, a throttle counter moved, nothing
// measured), else FAIL when a rule is broken (a percentile over its threshold, a streak of k
// misses, jitter, a baseline delta), else INVALID when a claim lacks samples or the two halves
// disagree (no steady state), else PASS. "reasons" lists every finding, not only the deciding one.
nlohmann::json evaluate(const RunRecord& run);
Outcome outcome_of(const nlohmann::json& result);

}  // namespace mmrt::verify
