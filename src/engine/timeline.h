// Per-request timelines: what happened to a request and when (monotonic ns), the raw material
// for metrics, traces and SLA reports.
#pragma once

#include <cstdint>
#include <vector>

namespace mmrt::engine {

enum class Event : uint8_t {
  kReceived,      // submit() returned (the intake is over)
  kMediaDecoded,  // all images decoded and preprocessed (value: images)
  kQueued,        // entered the scheduler's waiting queue
  kScheduled,     // first admitted to the running set (value: prefix-cache hit tokens)
  kEncoderStart,  // vision encoder job began (value: media index)
  kEncoderEnd,    // ... and ended (value: media index; 1 << 32 added on an encoder-cache hit)
  kPrefillChunk,  // a prefill chunk ran (value: tokens)
  kFirstToken,
  kToken,      // each later token
  kPreempted,  // KV freed for recompute (value: tokens dropped)
  kFinished,   // value: Outcome
  // The request's first byte was read (its clock's origin: deadline, TTFT and E2E count from
  // here; = kReceived when the caller gave no arrival stamp).
  kArrived,
  kRequestRead,  // its headers and body were complete (a server's HTTP read ended)
};
const char* event_name(Event e);

struct TimelineEntry {
  Event event;
  int64_t t_ns;
  int64_t value = 0;
};

class Timeline {
 public:
  void add(Event e, int64_t t_ns, int64_t value = 0) { entries_.push_back({e, t_ns, value}); }
  const std::vector<TimelineEntry>& entries() const { return entries_; }
  // Time of the first entry of this kind, or -1.
  int64_t first(Event e) const;
  int64_t last(Event e) const;
  int64_t count(Event e) const;
  // The origin every duration counts from: kArrived, else kReceived; -1 when neither.
  int64_t origin() const;

 private:
  std::vector<TimelineEntry> entries_;
};

}  // namespace mmrt::engine
