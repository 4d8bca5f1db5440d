#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <span>
#include <utility>

#include "core/clock.h"
#include "core/error.h"
#include "obs/report.h"
#include "server/service.h"

namespace mmrt::server {
namespace {

using json = nlohmann::ordered_json;

// Milliseconds to the microsecond.
double ms3(double seconds) {
  return std::round(seconds * 1e6) / 1e3;
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

const char* finish_reason(engine::Outcome o) {
  return o == engine::Outcome::kStopped ? "stop" : "length";
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// 429 for a tenant whose requests in flight hold its cap (prompt tokens or media bytes): it may
// retry when some of them end.
ApiError tenant_limit_error(const std::string& why) {
  ApiError err(429, "rate_limit_error", why, "", "tenant_in_flight_limit");
  err.retry_after_s = 1;
  return err;
}

}  // namespace

json Call::logprobs_json(std::span<const engine::TokenLogprobs> lp) {
  const io::Tokenizer& tok = svc_.engine()->tokenizer();
  // An id the tokenizer leaves unassigned (a gap, or a row past its vocabulary that the
  // checkpoint's embedding has) is a token without bytes, as the engine's text treats it.
  auto token_bytes = [&](int32_t id) -> std::string {
    if (id < 0 || id >= tok.vocab_size()) return {};
    try {
      return tok.token_bytes(id);
    } catch (const InvalidArgument&) {
      return {};
    }
  };
  auto bytes = [&](int32_t id) {
    json b = json::array();
    for (unsigned char c : token_bytes(id)) b.push_back(static_cast<int>(c));
    return b;
  };
  if (endpoint_ == Endpoint::kChat) {
    json content = json::array();
    for (const auto& t : lp) {
      json top = json::array();
      for (const auto& [id, v] : t.top)
        top.push_back({{"token", token_bytes(id)}, {"logprob", v}, {"bytes", bytes(id)}});
      content.push_back({{"token", token_bytes(t.token)},
                         {"logprob", t.logprob},
                         {"bytes", bytes(t.token)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  // The completions API's legacy shape.
  json tokens = json::array(), values = json::array(), tops = json::array(),
       offsets = json::array();
  for (const auto& t : lp) {
    const std::string piece = token_bytes(t.token);
    tokens.push_back(piece);
    values.push_back(t.logprob);
    json top = json::object();
    for (const auto& [id, v] : t.top) top[token_bytes(id)] = v;
    tops.push_back(top);
    offsets.push_back(text_offset_);
    text_offset_ += static_cast<int64_t>(piece.size());
  }
  return {{"tokens", tokens},
          {"token_logprobs", values},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

Call::Call(Service& svc, std::shared_ptr<Exchange> ex, Endpoint ep, std::string id,
           const Tenant& tenant, int64_t arrival_ns, int64_t read_ns)
    : svc_(svc),
      ex_(std::move(ex)),
      tenant_(tenant),
      endpoint_(ep),
      id_(std::move(id)),
      created_(unix_now()),
      arrival_ns_(arrival_ns),
      read_ns_(read_ns) {}

void Call::parse(std::string body) {
  std::shared_ptr<Call> self = shared_from_this();
  try {
    ParsedRequest p = parse_request(body, endpoint_, svc_.cfg().api);
    ex_->post([self, p = std::make_shared<ParsedRequest>(std::move(p))]() mutable {
      self->submit(std::move(*p));
    });
  } catch (const ApiError& e) {
    ex_->post([self, e] { self->fail(e, "error", ""); });
  } catch (const std::exception& e) {  // bad_alloc on a huge body: this request only
    ApiError err(500, "server_error", std::string("could not parse the request: ") + e.what());
    ex_->post([self, err] { self->fail(err, "failed", ""); });
  }
}

void Call::submit(ParsedRequest p) {
  if (ended_) return;
  if (cancelled_) return finish(nullptr, "cancelled", "");
  stream_ = p.stream;
  include_usage_ = p.include_usage;
  logprobs_ = p.request.sampling.logprobs >= 0;
  stream_ids_ = p.stream_ids;
  p.request.sla_class = Tenants::class_of(tenant_, p.request.sla_class, p.class_chosen);
  requested_class_ = p.request.sla_class;
  has_deadline_ = p.request.ttft_deadline_ns > 0;
  if (const engine::SlaConfig& sla = svc_.cfg().engine.sla;
      !requested_class_.empty() && sla.index_of(requested_class_) >= 0)
    has_deadline_ = has_deadline_ || sla.get(requested_class_).ttft_ns > 0;
  if (!requested_class_.empty() && !Tenants::allows(tenant_, requested_class_)) {
    std::string allowed;
    for (const auto& c : tenant_.classes) allowed += (allowed.empty() ? "" : ", ") + c;
    return fail(ApiError(403, "permission_error",
                         "tenant '" + tenant_.name + "' may not use SLA class '" +
                             requested_class_ + "' (its classes: " + allowed + ")",
                         "sla_class"),
                "error", "");
  }
  p.request.tenant = tenant_.name;
  p.request.tenant_max_prompt_tokens = tenant_.max_prompt_tokens;
  p.request.arrival_ns = arrival_ns_;
  p.request.read_ns = read_ns_;
  engine::Engine* eng = svc_.engine();
  if (!eng) return fail(ApiError(503, "unavailable_error", "Loading model"), "refused", "loading");
  {
    // Its media against its tenant's bytes in flight: uploads as decoded, each URL at the
    // per-item cap until it has arrived (then as fetched: this runs again after the fetches).
    int64_t bytes = static_cast<int64_t>(p.fetches.size() * svc_.cfg().api.max_media_bytes);
    for (const auto& m : p.request.media) bytes += static_cast<int64_t>(m.bytes.size());
    std::string why;
    if (!svc_.hold_media(tenant_.name, media_held_, bytes, why)) {
      return fail(tenant_limit_error(why), "refused", "tenant_limit");
    }
  }
  // A media part the model cannot take is the client's mistake, named before any download
  // (the engine would refuse it too, as Unimplemented).
  const models::ModelSpec& spec = eng->model_spec();
  for (size_t i = 0; i < p.request.media.size(); ++i) {
    const models::Modality m = p.request.media[i].modality;
    if (spec.takes(m)) continue;
    const std::string part = i < p.media_parts.size() ? p.media_parts[i] : "messages[]";
    return fail(bad_request(part + ": the model (" + spec.architecture + ") takes no " +
                                models::modality_name(m) + " input",
                            part + ".type"),
                "error", "");
  }
  if (!p.fetches.empty()) {
    // Refused before any download when the queue alone already breaks its promise.
    const std::string why = eng->precheck(p.request);
    if (!why.empty()) {
      return fail(ApiError(429, "rate_limit_error", why, "", "sla_unattainable"), "refused", "sla");
    }
    return fetch(std::make_shared<ParsedRequest>(std::move(p)));
  }
  media_parts_ = std::move(p.media_parts);  // for a failed item's error (on_done)
  handle_ = eng->submit(std::move(p.request));
  submitted_ = true;
  last_write_ns_ = now_ns();  // the first keep-alive ping comes after a silent interval
  std::weak_ptr<Call> weak = weak_from_this();
  std::shared_ptr<Exchange> ex = ex_;
  handle_->set_notify([weak, ex] {
    auto self = weak.lock();
    if (!self || self->posted_.exchange(true)) return;
    ex->post([self] {
      self->posted_ = false;
      self->drain();
    });
  });
}

void Call::fetch(std::shared_ptr<ParsedRequest> p) {
  // Every URL is fetched at once (on the fetch threads); the request is submitted when the
  // last one arrives, or answered with the first failure.
  fetch_start_ns_ = now_ns();
  fetches_left_ = p->fetches.size();
  std::shared_ptr<Call> self = shared_from_this();
  for (const MediaFetch& f : p->fetches)
    svc_.fetcher().fetch(f.url, fetch_cancelled_, [self, p, index = f.index](FetchResult r) {
      auto res = std::make_shared<FetchResult>(std::move(r));
      self->ex_->post([self, p, index, res] {
        if (self->ended_) return;
        if (!res->error.empty()) {
          self->download_s_ = static_cast<double>(now_ns() - self->fetch_start_ns_) * 1e-9;
          // Cancelled while queued (the connection went, or the drain ended): as submit().
          if (res->status == 499 || self->cancelled_) return self->finish(nullptr, "cancelled", "");
          if (res->status == 503) {  // the download queue is full: the server's load
            ApiError busy(503, "unavailable_error", res->error);
            busy.retry_after_s = 1;
            return self->fail(busy, "refused", "saturated");
          }
          if (res->status >= 500)
            return self->fail(ApiError(res->status, "server_error", res->error), "failed", "");
          std::string param;
          for (const MediaFetch& mf : p->fetches)
            if (mf.index == index) param = mf.param;
          return self->fail(res->status == 413
                                ? media_too_large(res->error, param)
                                : ApiError(res->status, "invalid_request_error", res->error, param),
                            "error", "");
        }
        p->request.media[index].bytes = std::move(res->bytes);
        if (--self->fetches_left_ > 0) return;
        self->download_s_ = static_cast<double>(now_ns() - self->fetch_start_ns_) * 1e-9;
        p->fetches.clear();
        self->submit(std::move(*p));
      });
    });
}

void Call::refuse_intake(size_t bytes, size_t queued) {
  ApiError err(503, "unavailable_error",
               "the server is busy reading request bodies (" + std::to_string(queued >> 20) +
                   " MiB queued, this one " + std::to_string(bytes >> 20) + " MiB; the bound is " +
                   std::to_string(svc_.cfg().intake.max_queued_bytes >> 20) + " MiB)");
  err.retry_after_s = 1;
  fail(err, "refused", "intake");
}

void Call::cancel() {
  cancelled_ = true;
  *fetch_cancelled_ = true;        // queued fetches of this call are skipped
  if (handle_) handle_->cancel();  // before submission: submit() sees the flag
}

void Call::ping() {
  if (ended_ || !stream_ || !handle_) return;
  // Before its first token a request with a deadline is either started in time or refused with
  // an HTTP status: a ping must not start its stream (the refusal would come inside a 200).
  if (!started_ && has_deadline_) return;
  if (now_ns() - last_write_ns_ < std::chrono::nanoseconds(svc_.cfg().ping_interval).count())
    return;
  start_stream();
  ex_->write(": ping\n\n");
  last_write_ns_ = now_ns();
}

void Call::drain() {
  // Text that arrived since the last drain goes out as one chunk. The events are taken all at
  // once: a loop taking one at a time keeps up with a fast model's tokens and delays the
  // first chunk until the model pauses.
  if (ended_ || !handle_) return;
  std::string text;
  for (engine::StreamEvent& ev : handle_->take_events()) {
    if (ended_) return;
    if (ev.kind == engine::StreamEvent::Kind::kText) {
      // The first token starts the stream (status line, role chunk) even before it has text:
      // the client's first byte leaves when the engine's first token does.
      if (stream_) start_stream();
      text += ev.text;
      for (auto& t : ev.logprobs) pending_logprobs_.push_back(std::move(t));
      if (stream_ids_)
        pending_ids_.insert(pending_ids_.end(), ev.token_ids.begin(), ev.token_ids.end());
      continue;
    }
    on_text(text);
    text.clear();
    on_done(ev);
    return;
  }
  on_text(text);
}

void Call::start_stream() {
  if (started_) return;
  started_ = true;
  first_byte_ns_ = now_ns();
  ex_->begin_stream({.status = 200,
                     .content_type = "text/event-stream",
                     .headers = {{"Cache-Control", "no-cache"}, {"X-Request-Id", id_}},
                     .body = ""});
  if (endpoint_ == Endpoint::kChat) {
    json c = chunk("", nullptr);
    c["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
    ex_->write("data: " + dump(c) + "\n\n");
  }
  last_write_ns_ = now_ns();
}

json Call::chunk(const std::string& text, const char* finish) const {
  json choice = {{"index", 0}, {"logprobs", nullptr}};
  choice["finish_reason"] = finish ? json(finish) : json(nullptr);
  if (endpoint_ == Endpoint::kChat)
    choice["delta"] = finish && text.empty() ? json::object() : json{{"content", text}};
  else
    choice["text"] = text;
  return {{"id", id_},
          {"object", endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", svc_.cfg().api.model_id},
          {"choices", json::array({choice})}};
}

void Call::on_text(const std::string& text) {
  if (!stream_ || text.empty() || ended_) return;  // whole responses take the text at the end
  start_stream();
  if (logprobs_) {
    json c = chunk(text, nullptr);
    c["choices"][0]["logprobs"] = logprobs_json(pending_logprobs_);
    logprobs_streamed_ += pending_logprobs_.size();
    pending_logprobs_.clear();
    if (stream_ids_) c["mmrt_ids"] = std::exchange(pending_ids_, {});
    ex_->write("data: " + dump(c) + "\n\n");
    last_write_ns_ = now_ns();
    return;
  }
  if (text_prefix_.empty()) {
    // Every content chunk is the same JSON but for the text: format the rest once.
    const std::string probe = "\x01";
    const std::string c = dump(chunk(probe, nullptr));
    const size_t at = c.find("\"\\u0001\"");
    text_prefix_ = "data: " + c.substr(0, at);
    text_suffix_ = c.substr(at + 8) + "\n\n";
  }
  std::string out =
      text_prefix_ + json(text).dump(-1, ' ', false, json::error_handler_t::replace) + text_suffix_;
  if (stream_ids_) {             // the tokens whose text this chunk completes, as its last member
    out.resize(out.size() - 3);  // "}\n\n"
    out += ",\"mmrt_ids\":" + json(std::exchange(pending_ids_, {})).dump() + "}\n\n";
  }
  ex_->write(std::move(out));
  last_write_ns_ = now_ns();
}

json Call::usage_json(const engine::RequestResult& r) const {
  const int64_t completion = static_cast<int64_t>(r.tokens.size());
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", r.prompt_tokens + completion},
          {"prompt_tokens_details", {{"cached_tokens", r.cached_prompt_tokens}}}};
}

void Call::on_done(const engine::StreamEvent& ev) {
  const engine::RequestResult r = handle_->wait();
  const bool ok = r.outcome == engine::Outcome::kFinished || r.outcome == engine::Outcome::kStopped;
  if (!ok) {
    if (r.outcome == engine::Outcome::kCancelled)
      return fail(ApiError(503, "unavailable_error",
                           "the request was cancelled" + (r.reason.empty() ? "" : ": " + r.reason)),
                  "cancelled", "", &r);
    const ErrorCode code = ev.error.value_or(ErrorCode::kInternal);
    ApiError err = from_error_code(code, r.reason.empty() ? ev.reason : r.reason);
    if (r.failed_media >= 0 && static_cast<size_t>(r.failed_media) < media_parts_.size()) {
      const std::string& part = media_parts_[static_cast<size_t>(r.failed_media)];
      if (code == ErrorCode::kUnimplemented)  // a format or codec the decoders do not take
        err = ApiError(415, "invalid_request_error", err.what(), "", "unsupported_media");
      if (err.status < 500) {  // the item's fault: named
        err = ApiError(err.status, err.type, part + ": " + err.what(), part, err.code);
      } else {  // the server's (a media worker lost): the reason, with its paths, to the log
        std::fprintf(stderr, "[mmrt] request %lld: preprocessing %s failed: %s\n",
                     static_cast<long long>(r.id), part.c_str(), err.what());
        err = ApiError(err.status, err.type,
                       "the server failed while preprocessing the request's media (its log has "
                       "the reason)");
      }
    }
    if (r.outcome == engine::Outcome::kRefused && r.over_tenant_cap) {
      // The tenant's own requests hold its share of the engine: it may retry when they end.
      err = tenant_limit_error(err.what());
    } else if (r.outcome == engine::Outcome::kRefused && code == ErrorCode::kUnavailable &&
               r.predicted_ttft_ns > 0) {
      // Admission: the class's promise cannot be kept now. The client may retry once the
      // queue ahead of it has drained (about the predicted excess), unless its own work alone
      // is over the class: then no retry helps, and it is told so (no Retry-After).
      err = ApiError(429, "rate_limit_error", err.what(), "", "sla_unattainable");
      err.retry_after_s =
          r.retry_after_ns < 0 ? -1 : static_cast<int>(std::ceil(r.retry_after_ns * 1e-9));
    }
    RequestRecord labels;  // `failed` only for the server's fault: a client's bad file is an error
    label_ended(labels, r, err.status);
    fail(err, labels.outcome, labels.refusal_reason, &r);
    return;
  }
  const std::string served = r.sla_class;
  json ext = {
      {"request_id", r.id},
      {"sla_class", served.empty() ? json(nullptr) : json(served)},
      {"requested_sla_class", requested_class_.empty() ? json(nullptr) : json(requested_class_)},
      {"downgraded", served != requested_class_},
      {"predicted_ttft_ms", ms3(static_cast<double>(r.predicted_ttft_ns) * 1e-9)},
      {"trace", "/v1/requests/" + id_ + "/trace"}};
  // TTFT ends with the first byte of the answer written (a stream's status line and first
  // chunk), as the client sees it; "write" is its lag behind the engine's first token.
  const obs::RequestTimes t = obs::request_times(r, {download_s_, first_byte_ns_});
  ext["ttft_ms"] = ms3(t.ttft);
  ext["stages_ms"] = {{"http_read", ms3(t.http_read)},
                      {"intake", ms3(t.intake)},
                      {"media_download", ms3(download_s_)},
                      {"media_decode", ms3(t.media_decode)},
                      {"media_resample", ms3(t.media_resample)},
                      {"preprocessing", ms3(t.preprocess)},
                      {"queue", ms3(t.queue)},
                      {"encoder", ms3(t.encode)},
                      {"prefill", ms3(t.prefill)},
                      {"write", ms3(t.write)},
                      {"decode", ms3(t.decode)}};
  const std::string tier = svc_.service_tier_of(served);
  // Counted and its trace kept before the response goes out: a client that asks for either as
  // soon as it has the answer finds them.
  finish(&r, finish_reason(r.outcome), "");
  if (stream_) {
    start_stream();
    json last = chunk("", finish_reason(r.outcome));
    if (logprobs_ && logprobs_streamed_ < r.logprobs.size())  // tokens without text of their own
      last["choices"][0]["logprobs"] =
          logprobs_json(std::span(r.logprobs).subspan(logprobs_streamed_));
    last["service_tier"] = tier;
    last["mmrt"] = ext;
    ex_->write("data: " + dump(last) + "\n\n");
    if (include_usage_) {
      json u = chunk("", nullptr);
      u["choices"] = json::array();
      u["usage"] = usage_json(r);
      ex_->write("data: " + dump(u) + "\n\n");
    }
    ex_->write("data: [DONE]\n\n");
    ex_->end_stream();
  } else {
    json choice = {
        {"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason(r.outcome)}};
    if (logprobs_) choice["logprobs"] = logprobs_json(r.logprobs);
    if (endpoint_ == Endpoint::kChat)
      choice["message"] = {{"role", "assistant"}, {"content", r.text}};
    else
      choice["text"] = r.text;
    json body = {{"id", id_},
                 {"object", endpoint_ == Endpoint::kChat ? "chat.completion" : "text_completion"},
                 {"created", created_},
                 {"model", svc_.cfg().api.model_id},
                 {"choices", json::array({choice})},
                 {"usage", usage_json(r)},
                 {"service_tier", tier},
                 {"mmrt", ext}};
    ex_->respond({.status = 200,
                  .content_type = "application/json",
                  .headers = {{"X-Request-Id", id_}, {"X-Mmrt-Sla-Class", served}},
                  .body = dump(body)});
  }
}

void Call::fail(const ApiError& e, const std::string& outcome, const std::string& why,
                const engine::RequestResult* r) {
  if (ended_) return;
  finish(r, outcome, why);  // before the answer, as on_done()
  if (started_) {           // mid-stream: an error event, then the end of the stream
    ex_->write("data: " + error_body(e) + "\n\n");
    ex_->write("data: [DONE]\n\n");
    ex_->end_stream();
  } else {
    ex_->respond(api_error_response(e));
  }
}

void Call::finish(const engine::RequestResult* r, const std::string& outcome,
                  const std::string& why) {
  if (ended_) return;
  ended_ = true;
  *fetch_cancelled_ = true;  // however it ended, its downloads still queued are skipped
  RequestRecord rec;
  rec.result = r;
  rec.requested_class = requested_class_;
  rec.outcome = outcome;
  rec.refusal_reason = why;
  rec.download_s = download_s_;
  rec.first_byte_ns = first_byte_ns_;
  svc_.metrics().observe(rec);
  std::string unused;
  svc_.hold_media(tenant_.name, media_held_, 0, unused);  // gives its media bytes back
  svc_.done(*this, r, download_s_);
  handle_.reset();
}

}  // namespace mmrt::server
