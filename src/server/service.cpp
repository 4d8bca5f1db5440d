#include "server/service.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/clock.h"
#include "server/realtime_connection.h"
#include "server/trace.h"

namespace mmrt::server {
namespace {

using nlohmann::json;

HttpResponse json_response(int status, std::string body) {
  return {
      .status = status, .content_type = "application/json", .headers = {}, .body = std::move(body)};
}

HttpResponse error_response(const ApiError& e, Headers extra = {}) {
  HttpResponse r = json_response(e.status, error_body(e));
  r.headers = std::move(extra);
  return r;
}

void count_refusal(Metrics& m, const char* reason) {
  RequestRecord rec;
  rec.outcome = "refused";
  rec.refusal_reason = reason;
  m.observe(rec);
}

// GET /v1/sla: the classes as configured and, with admission control (`quote`), what admission
// would predict for each now (docs/serving.md, "The classes now").
std::string sla_status(const engine::SlaConfig& sla,
                       const std::map<std::string, std::string>& tiers,
                       const engine::Quote* quote) {
  json classes = json::array();
  for (const engine::SlaClass& c : sla.classes) {
    json j = {{"name", c.name},
              {"ttft_ms", c.ttft_ns > 0 ? json(static_cast<double>(c.ttft_ns) * 1e-6) : json()},
              {"tpot_ms", c.tpot_ns > 0 ? json(static_cast<double>(c.tpot_ns) * 1e-6) : json()},
              {"weight", c.weight},
              {"on_miss", engine::on_miss_name(c.on_miss)},
              {"service_tiers", json::array()},
              {"predicted_ttft_ms", nullptr},
              {"prompt_tokens_alone", nullptr}};
    for (const auto& [tier, cls] : tiers)  // the OpenAI service_tier values that ask for it
      if (cls == c.name) j["service_tiers"].push_back(tier);
    if (quote)
      for (const engine::Quote::Class& q : quote->classes)
        if (q.name == c.name) {
          j["predicted_ttft_ms"] = std::round(q.ahead_ms * 1e3) * 1e-3;
          j["prompt_tokens_alone"] = q.prompt_tokens_alone;
          j["bias"] = q.bias;
        }
    classes.push_back(std::move(j));
  }
  json out = {{"object", "sla"},
              {"default_class", sla.default_class},
              {"admission", quote != nullptr},
              {"classes", std::move(classes)}};
  if (quote)
    out["prices"] = {{"prompt_token_ms", quote->token_ns * 1e-6},
                     {"prompt_token_idle_ms", quote->token_idle_ns * 1e-6},
                     {"attention_pair_ns", quote->pair_ns},
                     {"image_patch_ms", quote->patch_ns * 1e-6},
                     {"media_item_ms", quote->item_ns * 1e-6}};
  return out.dump();
}

// /health and /v1/sla while the model loads.
HttpResponse loading_response() {
  return json_response(
      503, R"({"error":{"code":503,"message":"Loading model","type":"unavailable_error"}})");
}

ApiError shutting_down() {
  return ApiError(503, "unavailable_error", "the server is shutting down");
}

// 401 for a request without a valid API key (`had_key`: one was sent, and is not valid).
HttpResponse unauthorized(bool had_key, Headers extra = {}) {
  extra.emplace_back("WWW-Authenticate", "Bearer");
  return api_error_response(ApiError(401, "authentication_error",
                                     had_key ? "the API key is not valid"
                                             : "an API key is required (Authorization: Bearer KEY)",
                                     "", "invalid_api_key"),
                            std::move(extra));
}

bool safe_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

}  // namespace

const std::string* HttpRequest::header(const std::string& lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return &v;
  return nullptr;
}

std::string HttpRequest::path() const {
  return target.substr(0, target.find('?'));
}

HttpResponse api_error_response(const ApiError& e, Headers extra) {
  if ((e.status == 429 || e.status == 503) && e.retry_after_s >= 0)
    extra.emplace_back("Retry-After", std::to_string(std::max(1, e.retry_after_s)));
  else if (e.status >= 400 && e.status < 500 && e.status != 408 && e.status != 409)
    extra.emplace_back("x-should-retry", "false");  // the same request fails again
  return error_response(e, std::move(extra));
}

Service::Service(ServerConfig cfg) : cfg_(std::move(cfg)), rng_(std::random_device{}()) {
  cfg_.api.sla = &cfg_.engine.sla;  // the API reads the classes from this copy
  created_unix_ = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  metrics_ = std::make_unique<Metrics>(cfg_.api.model_id, cfg_.engine.sla);
  FetchOptions fo = cfg_.fetch;
  fo.max_bytes = cfg_.api.max_media_bytes;
  fetcher_ = std::make_unique<MediaFetcher>(fo);
  tenants_ = cfg_.api_keys_file.empty() ? std::make_unique<Tenants>()
                                        : Tenants::load(cfg_.api_keys_file, cfg_.engine.sla);
  intake_ = std::make_unique<Intake>(cfg_.intake);
  // One budget for the audio all Realtime sessions hold (each session's options share it).
  cfg_.realtime.budget =
      std::make_shared<AudioBudget>(static_cast<int64_t>(cfg_.realtime.max_total_seconds * 1000));
}

Service::~Service() {
  intake_->stop();
}

void Service::stop_workers() {
  fetcher_.reset();
  intake_->stop();
  std::unordered_map<std::string, std::shared_ptr<Call>> left;
  {
    std::lock_guard<std::mutex> lk(mu_);
    left.swap(calls_);
  }
}

bool Service::intake(size_t bytes, std::function<void()> fn) {
  return intake_->submit(bytes, std::move(fn));
}

void Service::set_engine(std::unique_ptr<engine::Engine> e) {
  engine_ = std::move(e);
  ready_ = true;
}

std::unique_ptr<engine::Engine> Service::release_engine() {
  ready_ = false;
  return std::move(engine_);
}

std::string Service::new_id(const char* prefix) {
  std::lock_guard<std::mutex> lk(mu_);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s-%016llx%08llx", prefix,
                static_cast<unsigned long long>(rng_()),
                static_cast<unsigned long long>(rng_() & 0xffffffffu));
  return buf;
}

std::string Service::service_tier_of(const std::string& cls) const {
  for (const auto& [tier, c] : cfg_.api.tiers)
    if (c == cls) return tier;
  return cls.empty() ? "auto" : cls;
}

void Service::handle(HttpRequest req, std::shared_ptr<Exchange> ex) {
  try {
    route(req, ex);  // may move the body on
  } catch (const ApiError& e) {
    ex->respond(api_error_response(e));
  } catch (const std::exception& e) {
    ex->respond(error_response(ApiError(500, "server_error", e.what())));
  }
}

void Service::route(HttpRequest& req, const std::shared_ptr<Exchange>& ex) {
  const std::string path = req.path();
  auto only = [&](const char* method) {
    if (req.method == method) return true;
    ex->respond(error_response(
        ApiError(405, "invalid_request_error",
                 "method " + req.method + " is not allowed on " + path + " (use " + method + ")"),
        {{"Allow", method}}));
    return false;
  };
  if (path == "/health") {
    if (!only("GET")) return;
    if (!ready_) return ex->respond(loading_response());
    if (draining_)
      return ex->respond(json_response(
          503, R"({"error":{"code":503,"message":"Shutting down","type":"unavailable_error"}})"));
    if (std::string why = cfg_.out_of_service ? cfg_.out_of_service() : ""; !why.empty())
      return ex->respond(api_error_response(ApiError(503, "unavailable_error", why)));
    return ex->respond(json_response(200, R"({"status":"ok"})"));
  }
  if (path == "/metrics") {
    if (!only("GET")) return;
    engine::EngineStats s;
    std::optional<engine::Quote> quote;
    if (engine::Engine* e = engine()) {
      s = e->stats();
      if (cfg_.engine.admission_control) quote = e->quote();
    }
    int64_t in_flight = 0;
    {
      std::lock_guard<std::mutex> lk(mu_);
      in_flight = static_cast<int64_t>(calls_.size());
    }
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body =
        metrics_->render(s, in_flight, http_ ? http_->connections() : 0, quote ? &*quote : nullptr);
    if (cfg_.extra_metrics) r.body += cfg_.extra_metrics();
    return ex->respond(std::move(r));
  }
  if (path == "/v1/sla") {
    if (!only("GET")) return;
    engine::Engine* e = engine();
    if (!ready_ || !e) return ex->respond(loading_response());
    std::optional<engine::Quote> quote;
    if (cfg_.engine.admission_control) quote = e->quote();
    return ex->respond(
        json_response(200, sla_status(cfg_.engine.sla, cfg_.api.tiers, quote ? &*quote : nullptr)));
  }
  if (path == "/v1/models") {
    if (!only("GET")) return;
    json m = {{"object", "list"},
              {"data", json::array({{{"id", cfg_.api.model_id},
                                     {"object", "model"},
                                     {"created", created_unix_},
                                     {"owned_by", "mmrt"}}})}};
    return ex->respond(json_response(200, m.dump()));
  }
  if (path.rfind("/v1/models/", 0) == 0) {
    if (!only("GET")) return;
    const std::string id = path.substr(11);
    if (id != cfg_.api.model_id)
      throw ApiError(404, "not_found_error", "The model `" + id + "` does not exist.", "model",
                     "model_not_found");
    json m = {{"id", id}, {"object", "model"}, {"created", created_unix_}, {"owned_by", "mmrt"}};
    return ex->respond(json_response(200, m.dump()));
  }
  if (path == "/v1/chat/completions" || path == "/v1/completions") {
    if (!only("POST")) return;
    return completion(std::move(req), ex,
                      path == "/v1/chat/completions" ? Endpoint::kChat : Endpoint::kCompletion);
  }
  if (path == "/v1/realtime") {
    if (!only("GET")) return;
    return realtime(req, ex);
  }
  const std::string pre = "/v1/requests/", post = "/trace";
  if (path.rfind(pre, 0) == 0 && path.size() > pre.size() + post.size() &&
      path.compare(path.size() - post.size(), post.size(), post) == 0) {
    if (!only("GET")) return;
    return trace(req, path.substr(pre.size(), path.size() - pre.size() - post.size()), ex);
  }
  throw ApiError(404, "not_found_error", "no such endpoint: " + req.method + " " + path);
}

void Service::completion(HttpRequest req, const std::shared_ptr<Exchange>& ex, Endpoint ep) {
  // Refused before any parsing, decoding or model work (counted: how many requests met a server
  // loading, shutting down or out of service).
  if (draining_) {
    count_refusal(*metrics_, "shutting_down");
    return ex->respond(api_error_response(shutting_down(), {{"Connection", "close"}}));
  }
  if (!ready_) {
    count_refusal(*metrics_, "loading");
    return ex->respond(api_error_response(ApiError(503, "unavailable_error", "Loading model")));
  }
  if (std::string why = cfg_.out_of_service ? cfg_.out_of_service() : ""; !why.empty()) {
    count_refusal(*metrics_, "out_of_service");
    return ex->respond(api_error_response(ApiError(503, "unavailable_error", why)));
  }
  const Tenant* tenant = tenants_->authenticate(req.header("authorization"));
  if (!tenant) return ex->respond(unauthorized(req.header("authorization") != nullptr));
  double wait_s = 0;
  if (!tenants_->admit_rate(*tenant, now_ns(), wait_s)) {
    count_refusal(*metrics_, "rate_limit");
    char msg[160];
    std::snprintf(msg, sizeof msg, "tenant '%s' is over its rate of %g requests per second",
                  tenant->name.c_str(), tenant->requests_per_second);
    ApiError err(429, "rate_limit_error", msg, "", "rate_limit_exceeded");
    err.retry_after_s = static_cast<int>(std::ceil(wait_s));
    return ex->respond(api_error_response(err));
  }
  auto call =
      std::make_shared<Call>(*this, ex, ep, new_id(ep == Endpoint::kChat ? "chatcmpl" : "cmpl"),
                             *tenant, req.arrival_ns, req.read_ns);
  {
    std::lock_guard<std::mutex> lk(mu_);
    // A shutdown that began since the check above counts calls under this lock: refuse.
    if (draining_)
      return ex->respond(api_error_response(shutting_down(), {{"Connection", "close"}}));
    if (static_cast<int64_t>(calls_.size()) >= cfg_.max_in_flight) {
      count_refusal(*metrics_, "saturated");
      return ex->respond(
          api_error_response(ApiError(503, "unavailable_error",
                                      "the server is saturated: " + std::to_string(calls_.size()) +
                                          " requests in flight (--max-requests)")));
    }
    calls_.emplace(call->id(), call);
  }
  std::weak_ptr<Call> weak = call;
  ex->on_abort([weak] {
    if (auto c = weak.lock()) c->cancel();
  });
  // Large bodies (base64 media) and local media files are read on an intake lane.
  if (req.body.size() <= cfg_.inline_parse_bytes && req.body.find("file://") == std::string::npos)
    call->parse(std::move(req.body));
  else if (const size_t bytes = req.body.size();
           !intake(bytes, [call, body = std::make_shared<std::string>(std::move(req.body))]() {
             call->parse(std::move(*body));
           }))
    call->refuse_intake(bytes, intake_->queued_bytes());
}

void Service::realtime_closed(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  realtime_.erase(id);
}

void Service::realtime(const HttpRequest& req, const std::shared_ptr<Exchange>& ex) {
  if (draining_) return ex->respond(api_error_response(shutting_down(), {{"Connection", "close"}}));
  if (!ready_)
    return ex->respond(api_error_response(ApiError(503, "unavailable_error", "Loading model")));
  auto* up = dynamic_cast<WsUpgradable*>(ex.get());
  const std::string* upgrade = req.header("upgrade");
  std::string u = upgrade ? *upgrade : "";
  std::transform(u.begin(), u.end(), u.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!up || u != "websocket")
    return ex->respond(api_error_response(
        ApiError(426, "invalid_request_error",
                 "/v1/realtime is a WebSocket endpoint: send Upgrade: websocket"),
        {{"Upgrade", "websocket"}, {"Connection", "close"}}));
  // The model, as the openai client names it in the query (?model=...).
  const std::string q =
      req.target.find('?') == std::string::npos ? "" : req.target.substr(req.target.find('?') + 1);
  for (size_t at = 0; at <= q.size();) {
    const size_t end = std::min(q.find('&', at), q.size());
    const std::string kv = q.substr(at, end - at);
    if (kv.rfind("model=", 0) == 0 && kv.substr(6) != cfg_.api.model_id)
      throw ApiError(404, "not_found_error", "The model `" + kv.substr(6) + "` does not exist.",
                     "model", "model_not_found");
    at = end + 1;
  }
  // Authorization: Bearer KEY, or the browsers' subprotocol "openai-insecure-api-key.KEY".
  std::string auth = req.header("authorization") ? *req.header("authorization") : "";
  std::string subprotocol;
  if (const std::string* sp = req.header("sec-websocket-protocol")) {
    for (size_t at = 0; at <= sp->size();) {
      const size_t end = std::min(sp->find(',', at), sp->size());
      std::string p = sp->substr(at, end - at);
      p.erase(0, p.find_first_not_of(' '));
      p.erase(p.find_last_not_of(' ') + 1);
      const std::string key_pre = "openai-insecure-api-key.";
      if (p.rfind(key_pre, 0) == 0 && auth.empty()) auth = "Bearer " + p.substr(key_pre.size());
      if (p == "realtime") subprotocol = p;
      at = end + 1;
    }
  }
  const Tenant* tenant = tenants_->authenticate(auth.empty() ? nullptr : &auth);
  if (!tenant) return ex->respond(unauthorized(!auth.empty(), {{"Connection", "close"}}));
  if (!engine_->model_spec().takes(models::Modality::kAudio))
    throw bad_request("the model (" + engine_->model_spec().architecture +
                      ") takes no audio input: /v1/realtime needs an audio model");
  RealtimeOptions opt = cfg_.realtime;
  opt.model_id = cfg_.api.model_id;
  opt.tenant = tenant->name;
  opt.default_max_tokens = cfg_.api.default_max_tokens;
  const std::string id = new_id("rt");
  std::shared_ptr<RealtimeConnection> conn;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const uint64_t key = ++realtime_next_;
    conn = std::make_shared<RealtimeConnection>(*this, key, id.substr(3), opt);
    realtime_[key] = conn;
  }
  up->accept_websocket(conn, subprotocol);
}

void Service::done(const Call& c, const engine::RequestResult* r, double download_s) {
  std::shared_ptr<Call> keep;  // released outside the lock
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = calls_.find(c.id());
    if (it != calls_.end()) {
      keep = it->second;
      calls_.erase(it);
    }
  }
  if (r) remember_trace(c.id(), c.tenant(), *r, download_s);
}

bool Service::hold_media(const std::string& tenant, int64_t& held, int64_t bytes,
                         std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (bytes > held && !media_held_.charge(tenant, bytes - held, cfg_.tenant_max_media_bytes, why))
    return false;
  if (bytes < held) media_held_.release(tenant, held - bytes);
  held = bytes;
  return true;
}

void Service::remember_trace(const std::string& id, const std::string& tenant,
                             const engine::RequestResult& r, double download_s) {
  if (cfg_.trace_keep == 0) return;
  // Only what a trace reads (no text or log-probabilities), built outside the lock and shared
  // by the trace file and the endpoint.
  auto t = std::make_shared<TraceRecord>();
  t->download_ns = static_cast<int64_t>(download_s * 1e9);
  t->tenant = tenant;
  engine::RequestResult& k = t->result;
  k.id = r.id;
  k.outcome = r.outcome;
  k.sla_class = r.sla_class;
  k.prompt_tokens = r.prompt_tokens;
  k.cached_prompt_tokens = r.cached_prompt_tokens;
  k.tokens = r.tokens;
  k.predicted_ttft_ns = r.predicted_ttft_ns;
  k.media_decode_ns = r.media_decode_ns;
  k.media_resample_ns = r.media_resample_ns;
  k.timeline = r.timeline;
  std::shared_ptr<const TraceRecord> rec = std::move(t);
  if (!cfg_.trace_dir.empty())
    intake(0, [rec, path = cfg_.trace_dir + "/" + id + ".json", id] {
      std::ofstream f(path);
      f << chrome_trace(rec->result, id, rec->download_ns);
      if (!f) std::fprintf(stderr, "mmrt serve: cannot write trace %s\n", path.c_str());
    });
  std::lock_guard<std::mutex> lk(mu_);
  traces_[id] = std::move(rec);
  trace_order_.push_back(id);
  while (trace_order_.size() > cfg_.trace_keep) {
    traces_.erase(trace_order_.front());
    trace_order_.pop_front();
  }
}

void Service::trace(const HttpRequest& req, const std::string& id,
                    const std::shared_ptr<Exchange>& ex) {
  const Tenant* tenant = tenants_->authenticate(req.header("authorization"));
  if (!tenant) return ex->respond(unauthorized(req.header("authorization") != nullptr));
  if (!safe_id(id)) throw bad_request("malformed request id", "id");
  std::shared_ptr<const TraceRecord> rec;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = traces_.find(id);
    if (it != traces_.end()) rec = it->second;
  }
  // Another tenant's trace is answered as an unknown one.
  if (rec && rec->tenant != tenant->name) rec.reset();
  if (!rec)
    throw ApiError(404, "not_found_error",
                   "no trace for request `" + id +
                       "` (unknown, still running, or older than the last " +
                       std::to_string(cfg_.trace_keep) + " requests)");
  ex->respond(json_response(200, chrome_trace(rec->result, id, rec->download_ns)));
}

void Service::tick() {
  std::vector<std::shared_ptr<Call>> calls;
  {
    std::lock_guard<std::mutex> lk(mu_);
    calls.reserve(calls_.size());
    for (auto& [id, c] : calls_) calls.push_back(c);
  }
  if (!draining_) {
    for (auto& c : calls) c->post_ping();
    std::vector<std::shared_ptr<RealtimeConnection>> rts;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto& [k, w] : realtime_)
        if (auto r = w.lock()) rts.push_back(std::move(r));
    }
    for (auto& r : rts) r->post_tick();
    if (cfg_.on_stats)
      if (engine::Engine* e = engine())
        cfg_.on_stats(e->stats(), static_cast<int64_t>(calls.size()));
    return;
  }
  const int64_t now = now_ns();
  // Stop once no call has been open for 300 ms (the last answers get written), or 2 s past the
  // deadline whatever is left.
  if (calls.empty()) {
    int64_t since = empty_since_ns_.load();
    if (since == 0) empty_since_ns_.compare_exchange_strong(since, now);
    if (since != 0 && now - since >= 300'000'000 && http_) http_->stop();
    if (now <= drain_deadline_ns_ + 2'000'000'000) return;
  } else {
    empty_since_ns_ = 0;
  }
  if (now > drain_deadline_ns_ + 2'000'000'000) {
    if (http_) http_->stop();
    return;
  }
  if (now > drain_deadline_ns_ && !cancelled_all_.exchange(true)) {
    std::fprintf(stderr, "[mmrt] drain timeout: cancelling %zu requests\n", calls.size());
    for (auto& c : calls) c->post_cancel();
  }
}

void Service::shutdown(int signal) {
  if (draining_) {  // a second signal: stop now
    if (http_) http_->stop();
    return;
  }
  drain_deadline_ns_ = now_ns() + std::chrono::nanoseconds(cfg_.drain_timeout).count();
  if (draining_.exchange(true)) return;
  std::fprintf(stderr, "[mmrt] %s: draining (up to %.1f s), no new connections\n",
               signal == SIGINT ? "SIGINT" : "SIGTERM",
               static_cast<double>(cfg_.drain_timeout.count()) * 1e-3);
  if (http_) http_->stop_accepting();
  tick();
}

}  // namespace mmrt::server
