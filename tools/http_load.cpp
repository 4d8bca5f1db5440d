#include "http_load.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/base64.h"
#include "core/clock.h"
#include "core/error.h"
#include "verify/load.h"

namespace mmrt::cli {
namespace {

using nlohmann::json;

// The trace item as an OpenAI chat request (images as data URLs, streamed with usage).
std::string body_of(const TraceItem& it) {
  const engine::GenerateRequest& g = it.request;
  json msgs = json::array();
  size_t media = 0;
  for (const auto& m : g.messages) {
    json parts = json::array();
    for (const auto& p : m.content) {
      if (p.kind == models::ContentPart::Kind::kText) {
        parts.push_back({{"type", "text"}, {"text", p.text}});
      } else {
        const auto& bytes = g.media.at(media++).bytes;
        parts.push_back(
            {{"type", "image_url"},
             {"image_url",
              {{"url", "data:image/png;base64," + base64_encode(bytes.data(), bytes.size())}}}});
      }
    }
    msgs.push_back({{"role", m.role}, {"content", parts}});
  }
  const engine::SamplingParams& s = g.sampling;
  json b = {{"messages", msgs},
            {"max_tokens", s.max_tokens},
            {"temperature", s.temperature},
            {"seed", s.seed},
            {"ignore_eos", s.ignore_eos},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
  if (!it.sla_class.empty()) b["sla_class"] = it.sla_class;
  return b.dump();
}

}  // namespace

std::vector<engine::RequestResult> run_http_trace(const std::string& base_url,
                                                  const std::vector<TraceItem>& trace, int warmup,
                                                  bool progress) {
  verify::LoadOptions opts{.base_url = base_url, .timeout_s = 600};
  // Warm-up, not reported: pairs of requests, one pair at a time.
  for (int i = 0; i < warmup && i < static_cast<int>(trace.size()); i += 2) {
    std::vector<TraceItem> w;
    for (int k = i; k < std::min<int>(i + 2, std::min<int>(warmup, static_cast<int>(trace.size())));
         ++k) {
      w.push_back(trace[static_cast<size_t>(k)]);
      w.back().sla_class.clear();
    }
    verify::run_open_loop(
        std::vector<double>(w.size(), 0.0), [&](size_t k) { return body_of(w[k]); }, opts);
  }
  if (progress)
    opts.progress = [&](double t, size_t sent, size_t finished) {
      std::fprintf(stderr, "\r[http] %5.1fs  sent %zu/%zu  finished %zu   ", t, sent, trace.size(),
                   finished);
      std::fflush(stderr);
    };
  std::vector<double> times;
  for (const auto& it : trace) times.push_back(it.t_s);
  const auto got = verify::run_open_loop(
      times, [&](size_t i) { return body_of(trace[i]); }, opts);
  if (progress) std::fprintf(stderr, "\n");
  std::vector<engine::RequestResult> out(trace.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const verify::Observed& o = got[i];
    engine::RequestResult& r = out[i];
    r.timeline.add(engine::Event::kReceived, o.scheduled_ns);
    for (size_t k = 0; k < o.chunk_ns.size(); ++k)
      r.timeline.add(k == 0 ? engine::Event::kFirstToken : engine::Event::kToken, o.chunk_ns[k]);
    r.timeline.add(engine::Event::kFinished, o.done_ns);
    r.prompt_tokens = o.prompt_tokens;
    r.tokens.resize(static_cast<size_t>(o.completion_tokens));
    r.cached_prompt_tokens = o.cached_tokens;
    r.text = o.text;
    if (o.mmrt.is_object() && o.mmrt.contains("sla_class") && o.mmrt["sla_class"].is_string())
      r.sla_class = o.mmrt["sla_class"].get<std::string>();
    switch (o.status) {
      case verify::Status::kOk:
        r.outcome = o.finish == "stop" ? engine::Outcome::kStopped : engine::Outcome::kFinished;
        break;
      case verify::Status::kRefused:
        r.outcome = engine::Outcome::kRefused;
        r.reason = o.error;
        break;
      default:
        r.outcome = engine::Outcome::kFailed;
        r.reason = o.error;
    }
  }
  return out;
}

}  // namespace mmrt::cli
