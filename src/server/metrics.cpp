#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

#include "obs/report.h"

namespace mmrt::server {
namespace {

// vLLM's buckets (seconds).
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                          0.25,  0.5,   0.75, 1,    2.5,  5,    7.5,  10,
                                          20,    40,    80,   160,  640,  2560};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                         0.75, 1,     2.5,  5,     7.5, 10,   20,  40,  80};
const std::vector<double> kLongBuckets = {0.3, 0.5, 0.8, 1,  1.5, 2,   2.5, 5,   10,   15,  20,
                                          30,  40,  50,  60, 120, 240, 480, 960, 1920, 7680};
// Stages can be far shorter than a request: the TTFT buckets.
const char* const kStages[] = {"http_read",      "intake",        "media_download", "media_decode",
                               "media_resample", "preprocessing", "encoder",        "prefill",
                               "write",          "decode"};

std::string num(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name;
  out += '{';
  out += labels;
  out += "} ";
  out += num(v);
  out += '\n';
}

}  // namespace

std::string escape_label(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\')
      o += "\\\\";
    else if (c == '"')
      o += "\\\"";
    else if (c == '\n')
      o += "\\n";
    else
      o += c;
  }
  return o;
}

void Histogram::observe(double v) {
  const auto it = std::lower_bound(bounds_->begin(), bounds_->end(), v);
  if (it != bounds_->end()) ++counts_[static_cast<size_t>(it - bounds_->begin())];
  ++count_;
  sum_ += v;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cum = 0;
  const std::string sep = labels.empty() ? "" : ",";
  for (size_t i = 0; i < bounds_->size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{" + labels + sep + "le=\"" + num((*bounds_)[i]) + "\"} " +
           std::to_string(cum) + "\n";
  }
  out += name + "_bucket{" + labels + sep + "le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum{" + labels + "} " + num(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

Metrics::PerClass::PerClass()
    : ttft(&kTtftBuckets), itl(&kItlBuckets), e2e(&kLongBuckets), queue(&kLongBuckets) {
  for (const char* s : kStages) stages.emplace(s, Histogram(&kTtftBuckets));
}

Metrics::Metrics(std::string model_name, const engine::SlaConfig& sla)
    : model_(std::move(model_name)) {
  for (const auto& c : sla.classes) order_.push_back(c.name);
  order_.push_back("none");
  for (const auto& c : order_) by_class_[c];
}

Metrics::PerClass& Metrics::of(const std::string& cls) {
  return by_class_[cls.empty() ? "none" : cls];
}

std::string Metrics::labels(const std::string& cls) const {
  return "model_name=\"" + escape_label(model_) + "\",sla_class=\"" + escape_label(cls) + "\"";
}

void label_ended(RequestRecord& rec, const engine::RequestResult& r, int status) {
  using engine::Outcome;
  rec.refusal_reason.clear();
  switch (r.outcome) {
    case Outcome::kStopped:
      rec.outcome = "stop";
      return;
    case Outcome::kFinished:
      rec.outcome = "length";
      return;
    case Outcome::kCancelled:
      rec.outcome = "cancelled";
      return;
    case Outcome::kRefused:
      rec.outcome = "refused";
      rec.refusal_reason = r.over_tenant_cap ? "tenant_limit"
                           : r.error == ErrorCode::kUnavailable && r.predicted_ttft_ns > 0 ? "sla"
                           : r.error == ErrorCode::kResourceExhausted ? "too_large"
                                                                      : "invalid";
      return;
    default:
      rec.outcome = status < 500 ? "error" : "failed";
  }
}

void Metrics::observe(const RequestRecord& rec) {
  const engine::RequestResult* r = rec.result;
  // Served class (after any downgrade) when the engine had it, the asked one otherwise.
  const std::string cls = r && !r->sla_class.empty() ? r->sla_class : rec.requested_class;
  std::lock_guard<std::mutex> lk(mu_);
  PerClass& c = of(cls);
  ++c.outcomes[rec.outcome];
  if (rec.outcome == "refused")
    ++c.refusals[rec.refusal_reason.empty() ? "other" : rec.refusal_reason];
  if (rec.download_s > 0) c.stages.at("media_download").observe(rec.download_s);
  if (!r) return;
  c.generation_tokens += r->tokens.size();
  if (r->outcome == engine::Outcome::kRefused) return;
  c.prompt_tokens += static_cast<uint64_t>(r->prompt_tokens);
  c.cached_prompt_tokens += static_cast<uint64_t>(r->cached_prompt_tokens);
  // TTFT to the first byte written when the answer streamed (what the client sees), else to
  // the engine's first token; "write" is the lag between the two.
  const obs::RequestTimes t = obs::request_times(*r, {rec.download_s, rec.first_byte_ns});
  if (!t.completed) return;
  c.ttft.observe(t.ttft);
  if (rec.first_byte_ns > 0) c.stages.at("write").observe(t.write);
  c.e2e.observe(t.e2e);
  c.stages.at("http_read").observe(t.http_read);
  c.stages.at("intake").observe(t.intake);
  c.queue.observe(t.queue);
  if (t.media > 0) {
    c.stages.at("media_decode").observe(t.media_decode);
    if (t.media_resample > 0) c.stages.at("media_resample").observe(t.media_resample);
    c.stages.at("preprocessing").observe(t.preprocess);
  }
  if (t.encode > 0) c.stages.at("encoder").observe(t.encode);
  c.stages.at("prefill").observe(t.prefill);
  c.stages.at("decode").observe(t.decode);
  int64_t prev = -1;
  for (const auto& e : r->timeline.entries()) {
    if (e.event != engine::Event::kFirstToken && e.event != engine::Event::kToken) continue;
    if (prev >= 0) c.itl.observe(static_cast<double>(e.t_ns - prev) * 1e-9);
    prev = e.t_ns;
  }
}

std::string Metrics::render(const engine::EngineStats& s, int64_t http_in_flight,
                            int64_t connections, const engine::Quote* quote) const {
  std::string out;
  out.reserve(32 << 10);
  const std::string m = "model_name=\"" + escape_label(model_) + "\"";
  auto gauge = [&](const char* name, const char* help, double v, const char* type = "gauge") {
    header(out, name, type, help);
    sample(out, name, m, v);
  };
  gauge("mmrt_num_requests_running", "Requests in the engine's running set.",
        static_cast<double>(s.running));
  gauge("mmrt_num_requests_waiting", "Requests waiting for the scheduler.",
        static_cast<double>(s.waiting));
  gauge("mmrt_num_requests_in_media", "Of the waiting requests: admitted, media being decoded.",
        static_cast<double>(s.in_media));
  gauge("mmrt_http_requests_in_flight", "Completion requests the server is answering.",
        static_cast<double>(http_in_flight));
  gauge("mmrt_http_connections", "Open client connections.", static_cast<double>(connections));
  gauge("mmrt_realtime_sessions", "Open Realtime WebSocket sessions.",
        static_cast<double>(realtime_.open.load()));
  gauge("mmrt_realtime_sessions_total", "Realtime WebSocket sessions opened.",
        static_cast<double>(realtime_.opened.load()), "counter");
  gauge("mmrt_realtime_client_events_total", "Realtime client events received.",
        static_cast<double>(realtime_.events_in.load()), "counter");
  gauge("mmrt_realtime_server_events_total", "Realtime server events sent.",
        static_cast<double>(realtime_.events_out.load()), "counter");
  gauge("mmrt_realtime_error_events_total", "Realtime error events sent.",
        static_cast<double>(realtime_.errors.load()), "counter");
  gauge("mmrt_realtime_prefills_total", "Segmented prefill requests submitted.",
        static_cast<double>(realtime_.prefills.load()), "counter");
  gauge("mmrt_kv_cache_usage_perc", "Fraction of KV cache blocks in use (1 = full).",
        s.kv_blocks_total ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total : 0.0);
  gauge("mmrt_kv_cache_blocks_used", "KV cache blocks in use.", s.kv_blocks_used);
  gauge("mmrt_kv_cache_blocks_total", "KV cache blocks in all.", s.kv_blocks_total);
  gauge("mmrt_step_token_budget", "Tokens per engine step, as the batch controller set it.",
        s.token_budget);
  if (quote && !quote->classes.empty()) {
    const char* ttft = "mmrt_sla_predicted_ttft_seconds";
    header(out, ttft, "gauge",
           "Admission's predicted time to first token of a request of the class arriving now "
           "with no work of its own: the queue served before it, the step in flight, the "
           "margin, the class's learned bias.");
    for (const auto& c : quote->classes) sample(out, ttft, labels(c.name), c.ahead_ms * 1e-3);
    const char* alone = "mmrt_sla_prompt_tokens_alone";
    header(out, alone, "gauge",
           "The longest text prompt whose own work alone admission predicts within the class's "
           "time to first token; a longer one is refused as one this server cannot serve in "
           "that class.");
    for (const auto& c : quote->classes)
      sample(out, alone, labels(c.name), static_cast<double>(c.prompt_tokens_alone));
  }
  gauge("mmrt_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
        static_cast<double>(s.prefix_query_tokens), "counter");
  gauge("mmrt_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
        static_cast<double>(s.prefix_hit_tokens), "counter");
  gauge("mmrt_mm_cache_queries_total", "Media items looked up in the encoder cache.",
        static_cast<double>(s.encoder_hits + s.encoder_misses), "counter");
  gauge("mmrt_mm_cache_hits_total", "Media items found in the encoder cache.",
        static_cast<double>(s.encoder_hits), "counter");
  gauge("mmrt_encoder_runs_total", "Encoder jobs run.", static_cast<double>(s.encoder_runs),
        "counter");
  gauge("mmrt_encoder_split_steps_total",
        "Steps that ran part of an item's encoder, the rest left to later steps.",
        static_cast<double>(s.encoder_split_steps), "counter");
  gauge("mmrt_media_items_skipped_total",
        "Media items not decoded because a cache held their encoder output or prompt span.",
        static_cast<double>(s.media_skipped), "counter");
  gauge("mmrt_media_items_redecoded_total",
        "Skipped media items decoded after all (the cache lost them before they were encoded).",
        static_cast<double>(s.media_redecoded), "counter");
  gauge("mmrt_device_copies_total", "Copies through the compute backend (any direction).",
        static_cast<double>(s.transfers.to_device + s.transfers.to_host + s.transfers.on_device),
        "counter");
  gauge("mmrt_device_copy_bytes_total", "Bytes copied through the compute backend.",
        static_cast<double>(s.transfers.to_device_bytes + s.transfers.to_host_bytes +
                            s.transfers.on_device_bytes),
        "counter");
  gauge("mmrt_num_preemptions_total", "Requests preempted (KV freed for recompute).",
        static_cast<double>(s.preemptions), "counter");
  gauge("mmrt_engine_steps_total", "Engine steps run.", static_cast<double>(s.steps), "counter");
  gauge("mmrt_engine_step_seconds_total", "Time in the engine's steps (forward passes), summed.",
        static_cast<double>(s.step_ns) * 1e-9, "counter");
  gauge("mmrt_engine_busy_seconds_total",
        "Time the step loop was busy (iterations that ran a step, the step included).",
        static_cast<double>(s.loop_busy_ns) * 1e-9, "counter");
  gauge("mmrt_media_sandbox_items_total", "Media items decoded in sandbox workers.",
        static_cast<double>(s.media_sandbox.items), "counter");
  gauge("mmrt_media_sandbox_workers_lost_total", "Sandbox workers killed or crashed.",
        static_cast<double>(s.media_sandbox.workers_lost), "counter");
  gauge("mmrt_media_remote_encoded_total", "Media items encoded by an encode worker.",
        static_cast<double>(s.remote_encode.encoded), "counter");
  gauge("mmrt_media_remote_declined_total",
        "Media items encoded here because no encode worker was in reach.",
        static_cast<double>(s.remote_encode.declined), "counter");
  gauge("mmrt_media_remote_failed_total",
        "Media items encoded here because the encode worker failed or answered wrongly.",
        static_cast<double>(s.remote_encode.failed), "counter");

  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::string> classes = order_;
  for (const auto& [k, v] : by_class_)
    if (std::find(classes.begin(), classes.end(), k) == classes.end()) classes.push_back(k);
  auto per_class = [&](const char* name, const char* help, auto value) {
    header(out, name, "counter", help);
    for (const auto& cls : classes) sample(out, name, labels(cls), value(by_class_.at(cls)));
  };
  per_class("mmrt_prompt_tokens_total", "Prompt tokens of served requests.",
            [](const PerClass& c) { return static_cast<double>(c.prompt_tokens); });
  per_class("mmrt_prompt_tokens_cached_total", "Prompt tokens served from the prefix cache.",
            [](const PerClass& c) { return static_cast<double>(c.cached_prompt_tokens); });
  per_class("mmrt_generation_tokens_total", "Tokens generated.",
            [](const PerClass& c) { return static_cast<double>(c.generation_tokens); });
  header(out, "mmrt_request_outcome_total", "counter",
         "Requests ended, by outcome (stop, length, cancelled, refused, failed, error).");
  for (const auto& cls : classes)
    for (const auto& [o, n] : by_class_.at(cls).outcomes)
      sample(out, "mmrt_request_outcome_total",
             labels(cls) + ",outcome=\"" + escape_label(o) + "\"", static_cast<double>(n));
  header(out, "mmrt_admission_refusals_total", "counter",
         "Requests refused up front, by reason (sla: predicted TTFT over the class's budget).");
  for (const auto& cls : classes)
    for (const auto& [why, n] : by_class_.at(cls).refusals)
      sample(out, "mmrt_admission_refusals_total",
             labels(cls) + ",reason=\"" + escape_label(why) + "\"", static_cast<double>(n));
  auto hist = [&](const char* name, const char* help, auto pick) {
    header(out, name, "histogram", help);
    for (const auto& cls : classes) pick(by_class_.at(cls)).render(out, name, labels(cls));
  };
  hist("mmrt_time_to_first_token_seconds", "Time to first token, from arrival.",
       [](const PerClass& c) -> const Histogram& { return c.ttft; });
  hist("mmrt_inter_token_latency_seconds", "Time between consecutive output tokens.",
       [](const PerClass& c) -> const Histogram& { return c.itl; });
  hist("mmrt_e2e_request_latency_seconds", "Arrival to last token.",
       [](const PerClass& c) -> const Histogram& { return c.e2e; });
  hist("mmrt_request_queue_time_seconds", "Time in the scheduler's waiting queue.",
       [](const PerClass& c) -> const Histogram& { return c.queue; });
  header(out, "mmrt_request_stage_seconds", "histogram",
         "Time per request stage: http_read (its first byte to the request read whole), intake "
         "(parsing and handing on, less downloads), media_download (fetching URLs), "
         "media_decode (files to "
         "pixels or samples), media_resample (audio to the model's rate), preprocessing "
         "(resize and normalise, the log-mel), encoder, prefill (less encoder time), write (a "
         "stream's first byte written after the first token), decode.");
  for (const auto& cls : classes)
    for (const char* st : kStages)
      by_class_.at(cls).stages.at(st).render(out, "mmrt_request_stage_seconds",
                                             labels(cls) + ",stage=\"" + st + "\"");
  return out;
}

}  // namespace mmrt::server
