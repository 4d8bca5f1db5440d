// Load gauges over NATS (Core, no JetStream): each worker publishes its load a few times a
// second on `mmrt.load.<worker id>`; the router keeps the latest of each worker it knows.
// A gauge carries a per-worker sequence number: an older or repeated one is dropped, a gap is
// counted (a missed gauge is only superseded: the next one is whole). Payloads are checked
// like every value from another process; a bad one, or one from a worker the router does not
// route to, is ignored with a log line. The NATS client (libnats) reconnects by itself
// (forever, every 250 ms): a restarted NATS server is picked up without a restart here.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "engine/admission.h"

namespace mmrt::cluster {

struct LoadGauge {
  std::string id;  // the worker's id (as in etcd)
  int64_t seq = 0;
  int64_t waiting = 0, running = 0;  // the engine's queue and running set
  int64_t in_flight = 0;             // completion requests the server holds
  double kv_usage = 0;               // KV cache blocks in use, 0-1
  // Admission's quote for each class (engine/admission.h; no classes: none sent, or one out of
  // bounds dropped), which the router predicts a request's first token with
  // (cluster/ttft_quote.h).
  engine::Quote quote;
};

std::string to_json(const LoadGauge& g);
LoadGauge parse_load_gauge(std::string_view json);  // FormatError naming the field

inline constexpr const char* kLoadSubject = "mmrt.load.";

// A worker's side: publishes each sample on its own thread as soon as set() hands it over (one
// at a time; a sample superseded before it went out is skipped). `period_ms`: how often the
// caller samples (for the record; the caller's timer drives it).
class GaugePublisher {
 public:
  GaugePublisher(const std::string& nats_url, std::string id, int64_t period_ms = 250);
  ~GaugePublisher();
  void set(const LoadGauge& g);  // the latest sample (any thread)

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The router's side: the latest gauge of each worker.
class GaugeBoard {
 public:
  // `known(id)`: whether the router routes to that worker (others are ignored and logged once).
  GaugeBoard(const std::string& nats_url, std::function<bool(const std::string&)> known);
  ~GaugeBoard();
  // The worker's latest gauge if it came within `max_age_ms`.
  std::optional<LoadGauge> get(const std::string& id, int64_t max_age_ms) const;
  // The same with its age (since it arrived here).
  struct Reading {
    LoadGauge g;
    int64_t age_ns = 0, at_ns = 0;  // at_ns: when it arrived (now_ns clock)
  };
  std::optional<Reading> read(const std::string& id, int64_t max_age_ms) const;
  bool connected() const;
  int64_t gaps() const;     // gauges missed (sequence gaps)
  int64_t ignored() const;  // bad payloads, unknown workers, stale sequence numbers

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::cluster
