#include "engine/timeline.h"

namespace mmrt::engine {

const char* event_name(Event e) {
  switch (e) {
    case Event::kReceived:
      return "received";
    case Event::kMediaDecoded:
      return "media_decoded";
    case Event::kQueued:
      return "queued";
    case Event::kScheduled:
      return "scheduled";
    case Event::kEncoderStart:
      return "encoder_start";
    case Event::kEncoderEnd:
      return "encoder_end";
    case Event::kPrefillChunk:
      return "prefill_chunk";
    case Event::kFirstToken:
      return "first_token";
    case Event::kToken:
      return "token";
    case Event::kPreempted:
      return "preempted";
    case Event::kFinished:
      return "finished";
    case Event::kArrived:
      return "arrived";
    case Event::kRequestRead:
      return "request_read";
  }
  return "?";
}

int64_t Timeline::origin() const {
  const int64_t a = first(Event::kArrived);
  return a >= 0 ? a : first(Event::kReceived);
}

int64_t Timeline::first(Event e) const {
  for (const auto& x : entries_)
    if (x.event == e) return x.t_ns;
  return -1;
}
int64_t Timeline::last(Event e) const {
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
    if (it->event == e) return it->t_ns;
  return -1;
}
int64_t Timeline::count(Event e) const {
  int64_t n = 0;
  for (const auto& x : entries_) n += x.event == e;
  return n;
}

}  // namespace mmrt::engine
