// SLA classes: the latency promise a request carries (time to first token, time per output
// token), how much the class weighs against others, and what admission does when the promise
// cannot be kept. Loaded from a JSON file or the built-in defaults.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mmrt::engine {

enum class OnMiss : uint8_t {
  kRefuse,     // refuse at once with the predicted TTFT in the reason
  kDowngrade,  // serve it in the next class down (whose promise it can meet), or refuse
  kAccept,     // best effort: serve it anyway
};
// "refuse", "downgrade", "accept": the names an SLA config takes and GET /v1/sla reports.
const char* on_miss_name(OnMiss m);

struct SlaClass {
  std::string name;
  int64_t ttft_ns = 0;  // 0: no TTFT promise
  int64_t tpot_ns = 0;  // 0: no TPOT promise
  double weight = 1.0;  // slo policy: larger = more important
  OnMiss on_miss = OnMiss::kRefuse;
};

struct SlaConfig {
  std::vector<SlaClass> classes;  // most important first
  std::string default_class = "silver";
  // slo policy: no waiting request is passed over for longer than this (aging bound).
  int64_t max_starvation_ns = 10'000'000'000;

  // platinum: TTFT 300 ms / TPOT 50 ms, weight 4, refuse; gold: 800 ms / 100 ms, weight 2,
  // downgrade; silver: no TPOT promise, TTFT within 5 s, weight 1, refuse (a request that
  // cannot start within 5 s is refused at once rather than served silently late).
  static SlaConfig defaults();
  // {"classes":[{"name":..., "ttft_ms":..., "tpot_ms":..., "weight":...,
  // "on_miss":"refuse|downgrade|accept"}],
  //  "default_class": "...", "max_starvation_ms": ...}; FormatError naming the field.
  static SlaConfig load(const std::string& path);
  static SlaConfig from_json(const std::string& text, const std::string& origin);

  const SlaClass& get(const std::string& name) const;  // InvalidArgument for unknown names
  int index_of(const std::string& name) const;         // -1 if unknown

  // What happens to a request of class `cls` (unknown: refuse) whose first token is predicted
  // `ttft_ns` after its arrival, past its promise: its class's on_miss rule. A downgrade goes to
  // the first lower class whose TTFT promise `ttft_ns` meets (a class without one always does),
  // and becomes a refusal when there is none. Admission applies it on arrival; the engine
  // applies it again to a waiting request whose deadline can no longer be met.
  struct MissAction {
    OnMiss action = OnMiss::kRefuse;  // kAccept, kDowngrade (to `to`) or kRefuse
    int to = -1;                      // the class index for kDowngrade
  };
  MissAction on_miss(const std::string& cls, int64_t ttft_ns) const;
  // The time to first token promised a request of class `cls` ("": none) that asks for its own
  // deadline `explicit_ns` (0: none), 0 when nothing is promised: an explicit deadline tightens
  // the class's, never loosens it; a class without one gives it at most the loosest class's;
  // without a class it stands. InvalidArgument for an unknown class.
  int64_t ttft_budget_ns(const std::string& cls, int64_t explicit_ns) const;
};

}  // namespace mmrt::engine
