#include "server/trace.h"

#include <nlohmann/json.hpp>

namespace mmrt::server {

std::string chrome_trace(const engine::RequestResult& r, const std::string& id,
                         int64_t download_ns) {
  using engine::Event;
  using nlohmann::json;
  const auto& tl = r.timeline;
  const int64_t t0 = tl.origin();
  auto us = [&](int64_t t) { return static_cast<double>(t - t0) * 1e-3; };
  json events = json::array();
  events.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", 1},
                    {"tid", 1},
                    {"args", {{"name", "request " + id}}}});
  auto span = [&](const char* name, int64_t a, int64_t b, json args = json::object()) {
    if (a < 0 || b < a) return;
    events.push_back({{"name", name},
                      {"cat", "request"},
                      {"ph", "X"},
                      {"ts", us(a)},
                      {"dur", static_cast<double>(b - a) * 1e-3},
                      {"pid", 1},
                      {"tid", 1},
                      {"args", std::move(args)}});
  };
  auto instant = [&](const char* name, int64_t t, json args) {
    events.push_back({{"name", name},
                      {"cat", "request"},
                      {"ph", "i"},
                      {"s", "t"},
                      {"ts", us(t)},
                      {"pid", 1},
                      {"tid", 1},
                      {"args", std::move(args)}});
  };
  const int64_t tend = tl.last(Event::kFinished);
  // The request from its first byte; the server's intake (reading, parsing, downloads) ends at
  // submission (kReceived), where the engine's stages begin.
  const int64_t tread = tl.first(Event::kRequestRead), trecv = tl.first(Event::kReceived);
  span("request", t0, tend,
       {{"outcome", engine::outcome_name(r.outcome)},
        {"sla_class", r.sla_class},
        {"prompt_tokens", r.prompt_tokens},
        {"cached_prompt_tokens", r.cached_prompt_tokens},
        {"completion_tokens", r.tokens.size()},
        {"predicted_ttft_ms", static_cast<double>(r.predicted_ttft_ns) * 1e-6}});
  if (tread >= t0) span("http_read", t0, tread);
  span("intake", tread >= t0 ? tread : t0, trecv);
  if (download_ns > 0) span("media_download", trecv - download_ns, trecv);
  // One span for the media stage; its split (sums over the items) as arguments.
  span("media_decode", trecv, tl.first(Event::kMediaDecoded),
       {{"decode_ms", static_cast<double>(r.media_decode_ns) * 1e-6},
        {"resample_ms", static_cast<double>(r.media_resample_ns) * 1e-6}});
  span("queue", tl.first(Event::kQueued), tl.first(Event::kScheduled));
  const int64_t tf = tl.first(Event::kFirstToken);
  int64_t enc_start = -1, last = tl.first(Event::kScheduled), tokens = 0;
  for (const auto& e : tl.entries()) {
    switch (e.event) {
      case Event::kEncoderStart:
        enc_start = e.t_ns;
        break;
      case Event::kEncoderEnd:
        span("encoder", enc_start, e.t_ns,
             {{"item", e.value & 0xffffffff}, {"cache_hit", (e.value >> 32) != 0}});
        enc_start = -1;
        break;
      case Event::kPrefillChunk:
        // A chunk ends at its entry; it began when the previous chunk (or scheduling) ended.
        span("prefill_chunk", last, e.t_ns, {{"tokens", e.value}});
        last = e.t_ns;
        break;
      case Event::kFirstToken:
      case Event::kToken:
        instant("token", e.t_ns, {{"index", tokens++}});
        break;
      case Event::kPreempted:
        instant("preempted", e.t_ns, {{"tokens_dropped", e.value}});
        break;
      default:
        break;
    }
  }
  if (tf >= 0) span("decode", tf, tend, {{"tokens", r.tokens.size()}});
  json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace mmrt::server
