// Internal to the server module: the Service (routing, lifecycle, the books of requests in
// flight) and a Call (one completion request: parse, submit, stream or answer). Everything a
// Call does runs on its connection's executor, except parsing, which large bodies do on an
// intake lane (intake.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <thread>
#include <unordered_map>

#include "engine/tenant_ledger.h"
#include "server/fetcher.h"
#include "server/metrics.h"
#include "server/server.h"
#include "server/tenants.h"

namespace mmrt::server {

class Service;
class RealtimeConnection;

// An API error as the response: 429 and 503 carry Retry-After, other 4xx but 408 and 409
// x-should-retry: false (the same request fails again), plus `extra` headers.
HttpResponse api_error_response(const ApiError& e, Headers extra = {});

class Call : public std::enable_shared_from_this<Call> {
 public:
  // `arrival_ns` / `read_ns`: the HTTP request's stamps (HttpRequest), the origin of its clock.
  Call(Service& svc, std::shared_ptr<Exchange> ex, Endpoint ep, std::string id,
       const Tenant& tenant, int64_t arrival_ns = 0, int64_t read_ns = 0);
  // Parses the body (any thread); then submits on the exchange's executor.
  void parse(std::string body);
  void cancel();  // the client went away, or the server is shutting down
  // 503 with Retry-After: the intake lanes hold `queued` bytes of bodies and one of `bytes`
  // would pass their bound (on the call's executor).
  void refuse_intake(size_t bytes, size_t queued);
  void ping();  // an SSE keep-alive comment if nothing was written for a while
  // cancel() / ping() on the call's executor, from any thread.
  void post_cancel() {
    ex_->post([self = shared_from_this()] { self->cancel(); });
  }
  void post_ping() {
    ex_->post([self = shared_from_this()] { self->ping(); });
  }
  const std::string& id() const { return id_; }
  const std::string& tenant() const { return tenant_.name; }

 private:
  void submit(ParsedRequest p);
  void fetch(std::shared_ptr<ParsedRequest> p);  // its media URLs, then submit()
  void drain();
  void on_text(const std::string& text);
  void on_done(const engine::StreamEvent& ev);
  // Answers with an error (or ends the stream with one); `outcome` and `why` go to the metrics.
  // `r`: the engine's result when the request got that far.
  void fail(const ApiError& e, const std::string& outcome, const std::string& why,
            const engine::RequestResult* r = nullptr);
  void start_stream();
  nlohmann::ordered_json chunk(const std::string& text, const char* finish) const;
  nlohmann::ordered_json usage_json(const engine::RequestResult& r) const;
  nlohmann::ordered_json logprobs_json(std::span<const engine::TokenLogprobs> lp);
  void finish(const engine::RequestResult* r, const std::string& outcome, const std::string& why);

  Service& svc_;
  std::shared_ptr<Exchange> ex_;
  const Tenant& tenant_;
  Endpoint endpoint_;
  std::string id_;
  int64_t created_ = 0;
  int64_t arrival_ns_ = 0, read_ns_ = 0;
  bool stream_ = false, include_usage_ = false, started_ = false, ended_ = false;
  bool cancelled_ = false, submitted_ = false;
  bool has_deadline_ = false;  // a TTFT promise: no ping starts its stream before the first token
  std::string requested_class_;
  std::vector<std::string> media_parts_;   // each media item's request part, for its errors
  std::string text_prefix_, text_suffix_;  // a content chunk around its text
  // Log-probabilities: asked for, received and not yet sent, sent; the completions API's
  // running text offset.
  bool logprobs_ = false;
  std::vector<engine::TokenLogprobs> pending_logprobs_;
  bool stream_ids_ = false;  // chunks carry their tokens' ids (mmrt_stream_ids)
  std::vector<int32_t> pending_ids_;
  size_t logprobs_streamed_ = 0;
  int64_t text_offset_ = 0;
  std::optional<engine::RequestHandle> handle_;
  std::atomic<bool> posted_{false};
  int64_t last_write_ns_ = 0;
  int64_t first_byte_ns_ = 0;  // a stream's status line went out (0: not yet / not a stream)
  double download_s_ = 0;
  int64_t fetch_start_ns_ = 0;
  int64_t media_held_ = 0;  // media bytes charged to its tenant (Service::hold_media)
  size_t fetches_left_ = 0;
  std::shared_ptr<std::atomic<bool>> fetch_cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

class Service {
 public:
  explicit Service(ServerConfig cfg);
  ~Service();
  void handle(HttpRequest req, std::shared_ptr<Exchange> ex);  // on an I/O thread
  void set_engine(std::unique_ptr<engine::Engine> e);          // the loader, once loaded
  void set_http(HttpServer* http) { http_ = http; }
  void tick();                // on the event loop: keep-alive pings, the shutdown's progress
  void shutdown(int signal);  // SIGINT / SIGTERM: drain, then stop the event loop
  std::unique_ptr<engine::Engine> release_engine();
  // After the event loop has stopped: joins the fetch and intake threads and drops the calls
  // left (their exchanges refer to the event loop, which goes next).
  void stop_workers();

  // For calls.
  const ServerConfig& cfg() const { return cfg_; }
  engine::Engine* engine() const { return ready_.load() ? engine_.get() : nullptr; }
  Metrics& metrics() { return *metrics_; }
  MediaFetcher& fetcher() { return *fetcher_; }
  // Runs fn on an intake lane (`bytes`: the body it parses, 0 for small work); false when the
  // bytes queued in intake would pass their bound (fn dropped: answer 503).
  bool intake(size_t bytes, std::function<void()> fn);
  void done(const Call& c, const engine::RequestResult* r, double download_s);
  // Sets what a call of `tenant` holds of media bytes from `held` to `bytes`, against the
  // tenant's cap (cfg().tenant_max_media_bytes); false with the reason (nothing changes) when
  // growing to it would pass the cap.
  bool hold_media(const std::string& tenant, int64_t& held, int64_t bytes, std::string& why);
  // Keeps r's timeline as the trace of `id` (GET /v1/requests/ID/trace, --trace-dir), readable
  // by `tenant` only.
  void remember_trace(const std::string& id, const std::string& tenant,
                      const engine::RequestResult& r, double download_s);
  std::string service_tier_of(const std::string& cls) const;
  void realtime_closed(uint64_t id);  // a Realtime session ended

 private:
  void route(HttpRequest& req, const std::shared_ptr<Exchange>& ex);
  void completion(HttpRequest req, const std::shared_ptr<Exchange>& ex, Endpoint ep);
  // The trace of request `id`, to its own tenant (the API key's); 404 for anyone else, as for
  // an unknown id (no existence oracle).
  void trace(const HttpRequest& req, const std::string& id, const std::shared_ptr<Exchange>& ex);
  // GET /v1/realtime with Upgrade: websocket (realtime_session.h).
  void realtime(const HttpRequest& req, const std::shared_ptr<Exchange>& ex);
  std::string new_id(const char* prefix);

  ServerConfig cfg_;
  HttpServer* http_ = nullptr;
  std::unique_ptr<engine::Engine> engine_;
  std::atomic<bool> ready_{false}, draining_{false};
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<MediaFetcher> fetcher_;
  std::unique_ptr<Tenants> tenants_;
  int64_t created_unix_ = 0;
  // The shutdown's progress (tick() and shutdown() may run on different I/O threads).
  std::atomic<int64_t> drain_deadline_ns_{0};
  std::atomic<bool> cancelled_all_{false};
  std::atomic<int64_t> empty_since_ns_{0};  // draining: when the last call ended

  std::mutex mu_;  // calls_, traces_, rng_, media_held_
  engine::TenantLedger media_held_{"bytes of media"};
  std::unordered_map<std::string, std::shared_ptr<Call>> calls_;
  struct TraceRecord {
    engine::RequestResult result;  // its timeline and counts
    int64_t download_ns = 0;
    std::string tenant;  // who may read it
  };
  std::deque<std::string> trace_order_;
  std::unordered_map<std::string, std::shared_ptr<const TraceRecord>> traces_;
  std::mt19937_64 rng_;
  // Open Realtime sessions (for the idle tick), under mu_.
  std::map<uint64_t, std::weak_ptr<RealtimeConnection>> realtime_;
  uint64_t realtime_next_ = 0;

  // Large bodies are parsed (JSON, base64) and trace files written here.
  std::unique_ptr<Intake> intake_;
};

}  // namespace mmrt::server
