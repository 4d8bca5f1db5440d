// Latency reports from finished requests: percentiles of TTFT / TPOT / end-to-end per SLA class,
// SLO attainment, goodput, refusals and where the time went per stage, as text and JSON.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace mmrt::obs {

// Percentile (nearest rank on the sorted values, p in [0, 100]); NaN for no values.
double percentile(std::vector<double> v, double p);
// The same on values already sorted ascending (no copy, no sort): for several percentiles of one
// sample.
double percentile_sorted(const std::vector<double>& sorted, double p);
// Median (the mean of the two middle values for an even count) and mean; 0 for no values.
double median(std::vector<double> v);
double mean(const std::vector<double>& v);

// Where one request's time went (seconds; from its timeline). `completed`: it produced a first
// token and finished (the other fields are 0 otherwise). ttft and e2e count from arrival (the
// request's first byte, Timeline::origin); http_read is arrival to the request read whole,
// intake from there to submission (parsing; a server's media downloads excluded, 0 without a
// server's stamps); media is decode + preprocessing, encode the encoder jobs' sum, prefill the time
// from its first schedule to its first token less the encoder time, decode first token to finish.
struct RequestTimes {
  bool completed = false;
  double ttft = 0, e2e = 0, tpot = 0;  // tpot: 0 for one output token
  double http_read = 0, intake = 0;
  double write = 0;  // a streamed answer's first byte written after the engine's first token
  double media = 0, queue = 0, encode = 0, prefill = 0, decode = 0;
  // media split: decoding the files, resampling audio, and the rest (preprocessing: resize and
  // normalise, the log-mel; waiting for a media lane counts here too).
  double media_decode = 0, media_resample = 0, preprocess = 0;
};
// What a server saw of a request beyond its engine timeline: its media downloads (part of the
// intake) and when the first byte of its streamed answer was written (now_ns; 0: not streamed).
// With a first byte, TTFT ends there (as the client sees it) and `write` is its lag.
struct ServedStamps {
  double download_s = 0;
  int64_t first_byte_ns = 0;
};
RequestTimes request_times(const engine::RequestResult& r, const ServedStamps& served = {});

struct Dist {
  int64_t n = 0;
  double p50 = 0, p95 = 0, p99 = 0, mean = 0, max = 0;
  static Dist of(const std::vector<double>& v);
  nlohmann::json json() const;
};

struct ClassReport {
  std::string name;
  int64_t requests = 0, completed = 0, refused = 0, failed = 0, cancelled = 0, downgraded = 0;
  int64_t refused_late = 0;          // of `refused`: admitted, then refused before the first token
  int64_t refused_after_encode = 0;  // of `refused_late`: its encoder had already run
  int64_t slo_met = 0;               // completed within the requested class's TTFT and TPOT
  Dist ttft_ms, tpot_ms, e2e_ms;
  // Every gap between consecutive tokens of completed requests (first token included): a
  // prefill stall of other streams shows here in full, where the per-request TPOT mean dilutes
  // it over the request's tokens.
  Dist itl_ms;
  double attainment() const {
    return requests ? static_cast<double>(slo_met) / static_cast<double>(requests) : 0;
  }
};

struct StageBreakdown {  // mean ms per completed request
  double http_read = 0, intake = 0, media = 0, queue = 0, encode = 0, prefill = 0, decode = 0;
};

struct Report {
  std::string policy;
  double duration_s = 0;
  std::vector<ClassReport> classes;  // in SLA order, then "all"
  StageBreakdown stages;
  double goodput_rps = 0;       // requests that met their SLA per second
  double throughput_tok_s = 0;  // generated tokens per second
  double prefix_hit_rate = 0, encoder_hit_rate = 0;
  engine::EngineStats engine;
  nlohmann::json json() const;
  std::string text() const;  // a readable table
};

// `requested_class[i]` is the class request i asked for (before any downgrade).
Report make_report(const std::string& policy, double duration_s,
                   const std::vector<engine::RequestResult>& results,
                   const std::vector<std::string>& requested_class, const engine::SlaConfig& sla,
                   const engine::EngineStats& stats);

}  // namespace mmrt::obs
