// The server's metrics in the Prometheus text exposition format (names mmrt_*, labels model_name
// and sla_class): the engine's gauges and counters, request outcomes and admission refusals by
// class and reason, and histograms (vLLM's buckets) of TTFT, inter-token latency, end-to-end,
// queue time and each stage of a request (media download, media decode + preprocessing,
// encoder, prefill, decode). Observations take one short mutex; rendering copies under it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace mmrt::server {

class Histogram {
 public:
  explicit Histogram(const std::vector<double>* bounds)
      : bounds_(bounds), counts_(bounds->size()) {}
  void observe(double v);
  // `name`_bucket{labels,le="..."} lines (cumulative, ending at +Inf), then _sum and _count.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  const std::vector<double>* bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  uint64_t count_ = 0;
  double sum_ = 0;
};

// What the server knows of one request when it ends.
struct RequestRecord {
  const engine::RequestResult* result = nullptr;  // null: ended before reaching the engine
  std::string requested_class;                    // as asked ("" for best effort)
  std::string outcome;         // "stop", "length", "cancelled", "refused", "failed", "error"
  std::string refusal_reason;  // for refusals: "sla", "saturated", "rate_limit", "too_large", ...
  double download_s = 0;       // fetching its media URLs
  int64_t first_byte_ns = 0;   // a stream's first byte written (now_ns; 0: none)
};

// Sets rec's outcome and refusal reason for a request the engine ended as `r`, answered with
// HTTP `status` where it did not finish: "stop", "length", "cancelled"; "refused" with reason
// "tenant_limit", "sla" (admission's prediction), "too_large" (over the KV cache) or "invalid";
// "failed" for the server's fault (a 5xx), else "error" (the request's own input). The one rule
// the HTTP calls and the Realtime sessions label with.
void label_ended(RequestRecord& rec, const engine::RequestResult& r, int status);

class Metrics {
 public:
  Metrics(std::string model_name, const engine::SlaConfig& sla);
  void observe(const RequestRecord& r);
  // Realtime WebSocket sessions (counted by the service, lock-free).
  struct Realtime {
    std::atomic<int64_t> open{0}, opened{0}, events_in{0}, events_out{0}, errors{0}, prefills{0};
  };
  Realtime& realtime() { return realtime_; }
  // The whole exposition: engine stats, the server's own gauges and everything observed; with
  // `quote` (admission's, engine::Engine::quote), per class its predicted time to first token
  // for a request arriving now with no work of its own and the longest prompt it can take.
  std::string render(const engine::EngineStats& s, int64_t http_in_flight, int64_t connections,
                     const engine::Quote* quote = nullptr) const;

 private:
  struct PerClass {
    PerClass();
    Histogram ttft, itl, e2e, queue;
    std::map<std::string, Histogram> stages;
    uint64_t prompt_tokens = 0, cached_prompt_tokens = 0, generation_tokens = 0;
    std::map<std::string, uint64_t> outcomes, refusals;
  };
  PerClass& of(const std::string& cls);
  std::string labels(const std::string& cls) const;

  std::string model_;
  std::vector<std::string> order_;  // classes in SLA order, then "none"
  mutable std::mutex mu_;
  std::map<std::string, PerClass> by_class_;
  Realtime realtime_;
};

// Escapes a label value (backslash, quote, newline).
std::string escape_label(const std::string& v);

}  // namespace mmrt::server
