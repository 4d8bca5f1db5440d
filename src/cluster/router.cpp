#include "cluster/router.h"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "cluster/attempt.h"
#include "cluster/cache_events.h"
#include "cluster/etcd.h"
#include "cluster/load_gauges.h"
#include "cluster/prompt_blocks.h"
#include "cluster/routing.h"
#include "cluster/stream_relay.h"
#include "cluster/worker_info.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/hash.h"
#include "server/service.h"

namespace mmrt::cluster {

using nlohmann::json;
using server::Exchange;
using server::Headers;
using server::HttpRequest;
using server::HttpResponse;

namespace {

// The server's error answers (same shape and headers as a worker's own).
HttpResponse error_response(int status, const std::string& type, const std::string& msg) {
  return server::api_error_response(server::ApiError(status, type, msg));
}

// The event that ends a stream in error, as a worker writes it.
std::string stream_error(const std::string& msg) {
  return "data: " + server::error_body(server::ApiError(500, "server_error", msg)) + "\n\n";
}

}  // namespace

class Router {
 public:
  explicit Router(RouterConfig cfg) : cfg_(std::move(cfg)) {}
  ~Router() {
    kv_.reset();
    media_.reset();
    gauges_.reset();
    stop_polling();
    for (CURL* c : handles_) curl_easy_cleanup(c);
  }

  void start_polling() {
    poller_ = std::thread([this] { poll_loop(); });
    if (cfg_.nats.empty()) return;
    auto known = [this](const std::string& id) {
      std::lock_guard<std::mutex> lk(mu_);
      return std::any_of(workers_.begin(), workers_.end(),
                         [&](const WorkerInfo& w) { return w.id == id; });
    };
    gauges_ = std::make_unique<GaugeBoard>(cfg_.nats, known);
    media_ = std::make_unique<CacheBoard>(cfg_.nats, kMediaTopic, known);
    if (prompts_) kv_ = std::make_unique<CacheBoard>(cfg_.nats, kKvTopic, known);
  }
  // Loads the checkpoint's tokenizer and processor for KV-aware routing (before listening).
  void load_prompts() {
    if (cfg_.model_dir.empty()) return;
    if (cfg_.nats.empty())
      throw InvalidArgument(
          "--model (KV-aware routing) needs --nats: the workers' prefix-cache "
          "keys come over NATS");
    prompts_ = std::make_unique<PromptBlocks>(cfg_.model_dir, cfg_.model, cfg_.api_keys_file,
                                              cfg_.sla_file);
  }
  void stop_polling() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (poller_.joinable()) poller_.join();
  }

  void handle(HttpRequest req, const std::shared_ptr<Exchange>& ex);

  // Waits for the requests in flight; past `limit` aborts them and waits for their threads.
  void drain(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!done_cv_.wait_for(lk, limit, [&] { return in_flight_ == 0; })) {
      abort_all_ = true;
      done_cv_.wait(lk, [&] { return in_flight_ == 0; });
    }
  }
  void set_draining() { draining_ = true; }

 private:
  void poll_loop();
  void proxy(const HttpRequest& req, const std::shared_ptr<Exchange>& ex,
             const std::shared_ptr<std::atomic<bool>>& gone);
  void health(const std::shared_ptr<Exchange>& ex);
  void metrics(const std::shared_ptr<Exchange>& ex);
  void log_once(const std::string& key, const std::string& line) {
    if (logged_.insert(key + "\n" + line).second)
      std::fprintf(stderr, "mmrt router: %s\n", line.c_str());
  }

  RouterConfig cfg_;
  mutable std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  bool stop_ = false;
  std::vector<WorkerInfo> workers_;  // serving cfg_.model, by id
  bool etcd_ok_ = false, ever_read_ = false;
  int64_t etcd_ok_ns_ = 0;
  std::string etcd_error_;
  int64_t in_flight_ = 0;
  std::atomic<bool> abort_all_{false}, draining_{false};
  std::atomic<int64_t> served_{0}, refused_{0}, failed_{0}, no_worker_{0}, passed_on_{0},
      saturated_{0}, resumed_{0};
  std::set<std::string> logged_;  // poller thread only
  std::unique_ptr<GaugeBoard> gauges_;
  std::unique_ptr<CacheBoard> media_;  // with gauges_
  std::unique_ptr<PromptBlocks> prompts_;
  std::unique_ptr<CacheBoard> kv_;  // with gauges_ and prompts_
  std::atomic<int64_t> kv_routed_{0}, kv_moves_{0}, kv_predicted_{0};
  // The KV blocks of the prompts this router has in flight on each worker (Dynamo's active
  // blocks, the decode term of its cost: counted here as requests start and end, not from a
  // gauge that lags by its period). Under mu_.
  std::map<std::string, int64_t> active_;
  std::atomic<int64_t> media_moves_{0};
  std::vector<CURL*> handles_;  // idle libcurl handles (at most max_in_flight)
  std::atomic<int64_t> load_overrides_{0};
  std::thread poller_;
};

void Router::poll_loop() {
  EtcdClient etcd(cfg_.etcd, std::chrono::milliseconds(1000));
  for (;;) {
    try {
      std::vector<WorkerInfo> next = list_workers(
          etcd, cfg_.prefix, "both", cfg_.model,
          [this](const std::string& key, const std::string& why) { log_once(key, why); });
      std::lock_guard<std::mutex> lk(mu_);
      std::set<std::string> before, after;
      for (const auto& w : workers_) before.insert(w.id);
      for (const auto& w : next) after.insert(w.id);
      for (const auto& id : after)
        if (!before.count(id)) std::fprintf(stderr, "mmrt router: worker %s joined\n", id.c_str());
      for (const auto& id : before)
        if (!after.count(id)) std::fprintf(stderr, "mmrt router: worker %s left\n", id.c_str());
      if (!etcd_ok_ && ever_read_)
        std::fprintf(stderr, "mmrt router: etcd at %s answers again\n", cfg_.etcd.c_str());
      workers_ = std::move(next);
      etcd_ok_ = ever_read_ = true;
      etcd_ok_ns_ = now_ns();
      etcd_error_.clear();
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu_);
      if (etcd_ok_ || etcd_error_.empty())
        std::fprintf(stderr, "mmrt router: %s; routing on the last view (%zu workers)\n", e.what(),
                     workers_.size());
      etcd_ok_ = false;
      etcd_error_ = e.what();
    }
    std::unique_lock<std::mutex> lk(mu_);
    if (cv_.wait_for(lk, cfg_.poll, [&] { return stop_; })) return;
  }
}

void Router::health(const std::shared_ptr<Exchange>& ex) {
  json j;
  int status = 200;
  {
    std::lock_guard<std::mutex> lk(mu_);
    json ws = json::array();
    for (const auto& w : workers_) ws.push_back({{"id", w.id}, {"url", w.url}});
    json e = {{"ok", etcd_ok_}, {"endpoint", cfg_.etcd}};
    if (!etcd_ok_) {
      e["error"] = etcd_error_.empty() ? "not read yet" : etcd_error_;
      if (ever_read_) e["last_view_age_ms"] = (now_ns() - etcd_ok_ns_) / 1'000'000;
    }
    j = {{"status", "ok"}, {"model", cfg_.model}, {"workers", ws}, {"etcd", e}};
    if (gauges_) {
      json loads = json::object();
      for (const auto& w : workers_)
        if (auto g = gauges_->get(w.id, 1000))
          loads[w.id] = {
              {"running", g->running}, {"waiting", g->waiting}, {"kv_usage", g->kv_usage}};
      j["nats"] = {{"ok", gauges_->connected()}, {"endpoint", cfg_.nats}, {"loads", loads}};
    }
    if (workers_.empty()) {
      status = 503;
      j["status"] = "no worker serving '" + cfg_.model + "' is registered";
    } else if (!etcd_ok_) {
      j["status"] = "degraded: etcd unreachable, routing on the last view of the workers";
    }
    if (draining_) {
      status = 503;
      j["status"] = "shutting down";
    }
  }
  HttpResponse r;
  r.status = status;
  r.body = j.dump();
  ex->respond(std::move(r));
}

void Router::metrics(const std::shared_ptr<Exchange>& ex) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double v,
                    const std::string& labels = "") {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    out += std::string(name) + labels + " " + std::to_string(v) + "\n";
  };
  size_t workers = 0;
  bool ok = false;
  double age = 0;
  int64_t in_flight = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    workers = workers_.size();
    ok = etcd_ok_;
    age = ever_read_ ? static_cast<double>(now_ns() - etcd_ok_ns_) * 1e-9 : 0;
    in_flight = in_flight_;
  }
  metric("mmrt_router_workers", "gauge", "Workers serving the router's model.",
         static_cast<double>(workers));
  metric("mmrt_router_etcd_up", "gauge", "1 when the last read of etcd succeeded.", ok ? 1 : 0);
  metric("mmrt_router_view_age_seconds", "gauge", "Age of the view of the workers.", age);
  metric("mmrt_router_requests_in_flight", "gauge", "Requests being relayed.",
         static_cast<double>(in_flight));
  metric("mmrt_router_passed_on_total", "counter",
         "Tries passed to the next worker (a refusal, or no connection).",
         static_cast<double>(passed_on_.load()));
  if (gauges_) {
    metric("mmrt_router_nats_up", "gauge", "1 while connected to NATS.", gauges_->connected());
    metric("mmrt_router_gauge_gaps_total", "counter", "Load gauges missed (sequence gaps).",
           static_cast<double>(gauges_->gaps()));
    metric("mmrt_router_gauges_ignored_total", "counter",
           "Load gauges ignored (malformed, unknown worker, stale).",
           static_cast<double>(gauges_->ignored()));
    metric("mmrt_router_media_moves_total", "counter",
           "Requests sent first to a worker holding their media's encoder output (not their "
           "affinity worker).",
           static_cast<double>(media_moves_.load()));
    metric("mmrt_router_media_resyncs_total", "counter",
           "Encoder-cache snapshots taken from workers (first sight, or events lost).",
           static_cast<double>(media_->resyncs()));
    metric("mmrt_router_media_events_ignored_total", "counter",
           "Encoder-cache events ignored (malformed, forged, of unknown workers, already applied).",
           static_cast<double>(media_->ignored()));
    if (kv_) {
      metric("mmrt_router_kv_routed_total", "counter",
             "Requests ordered by KV cost (some worker held blocks of their prompt).",
             static_cast<double>(kv_routed_.load()));
      metric("mmrt_router_kv_moves_total", "counter",
             "Requests the KV cost sent off their affinity worker.",
             static_cast<double>(kv_moves_.load()));
      metric("mmrt_router_kv_predicted_cached_tokens_total", "counter",
             "Prompt tokens predicted cached on the first worker tried (KV-routed requests).",
             static_cast<double>(kv_predicted_.load()));
      metric("mmrt_router_kv_resyncs_total", "counter",
             "Prefix-cache snapshots taken from workers (first sight, or events lost).",
             static_cast<double>(kv_->resyncs()));
      metric("mmrt_router_kv_events_ignored_total", "counter",
             "Prefix-cache events ignored (malformed, forged, of unknown workers, applied).",
             static_cast<double>(kv_->ignored()));
    }
    metric("mmrt_router_load_overrides_total", "counter",
           "Requests sent off their affinity worker for its load.",
           static_cast<double>(load_overrides_.load()));
  }
  metric("mmrt_router_resumed_total", "counter",
         "Streams resumed on another worker after a failure mid-stream.",
         static_cast<double>(resumed_.load()));
  out +=
      "# HELP mmrt_router_requests_total Requests, by outcome.\n"
      "# TYPE mmrt_router_requests_total counter\n";
  const std::pair<const char*, int64_t> outcomes[] = {{"served", served_.load()},
                                                      {"refused", refused_.load()},
                                                      {"failed", failed_.load()},
                                                      {"no_worker", no_worker_.load()},
                                                      {"saturated", saturated_.load()}};
  for (const auto& [name, v] : outcomes)
    out += std::string("mmrt_router_requests_total{outcome=\"") + name + "\"} " +
           std::to_string(v) + "\n";
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = std::move(out);
  ex->respond(std::move(r));
}

void Router::handle(HttpRequest req, const std::shared_ptr<Exchange>& ex) {
  const std::string path = req.path();
  if (path == "/health" && req.method == "GET") return health(ex);
  if (path == "/metrics" && req.method == "GET") return metrics(ex);
  if (path == "/v1/models" && req.method == "GET") {
    HttpResponse r;
    r.body = json{{"object", "list"},
                  {"data",
                   json::array({{{"id", cfg_.model}, {"object", "model"}, {"owned_by", "mmrt"}}})}}
                 .dump();
    return ex->respond(std::move(r));
  }
  if (path != "/v1/chat/completions" && path != "/v1/completions")
    return ex->respond(
        error_response(404, "not_found_error", "no such endpoint: " + req.method + " " + path));
  if (req.method != "POST")
    return ex->respond(error_response(405, "invalid_request_error",
                                      "method " + req.method + " is not allowed on " + path));
  if (draining_)
    return ex->respond(error_response(503, "unavailable_error", "the router is shutting down"));
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (in_flight_ >= cfg_.max_in_flight) {
      ++saturated_;
      return ex->respond(error_response(503, "unavailable_error",
                                        "the router is saturated: " + std::to_string(in_flight_) +
                                            " requests in flight (--max-requests)"));
    }
    ++in_flight_;
  }
  auto gone = std::make_shared<std::atomic<bool>>(false);
  ex->on_abort([gone] { *gone = true; });
  // One thread per request relayed (bounded by max_in_flight): it blocks on the worker.
  std::thread([this, req = std::move(req), ex, gone] {
    try {
      proxy(req, ex, gone);
    } catch (const std::exception& e) {
      ++failed_;
      ex->post([ex, msg = std::string(e.what())] {
        if (!ex->aborted()) ex->respond(error_response(500, "server_error", msg));
      });
    }
    std::lock_guard<std::mutex> lk(mu_);
    --in_flight_;
    done_cv_.notify_all();
  }).detach();
}

void Router::proxy(const HttpRequest& req, const std::shared_ptr<Exchange>& ex,
                   const std::shared_ptr<std::atomic<bool>>& gone) {
  std::vector<WorkerInfo> workers;
  {
    std::lock_guard<std::mutex> lk(mu_);
    workers = workers_;
  }
  const std::string* auth = req.header("authorization");
  const json parsed = parse_body(req.body);
  std::vector<size_t> order =
      rendezvous_order(affinity_key(req.path(), parsed, req.body, auth ? *auth : ""), workers);
  // KV-aware: the request's prompt laid out as the workers lay it out, ordered by Dynamo's cost
  // when some worker holds a block of it; otherwise the media and load moves below.
  std::vector<int64_t> cached(workers.size(), -1);  // prompt tokens predicted cached, per worker
  std::optional<PromptLayout> layout;
  if (kv_ && !kv_->empty()) layout = prompts_->layout(req.path(), parsed, auth);
  bool by_kv = false;
  if (layout) {
    KvChoice kc = kv_choice(
        *layout, workers, order,
        [this](const std::string& id, std::span<const Hash128> chain) {
          return kv_->leading(id, chain);
        },
        [this](const std::string& id) {
          std::lock_guard<std::mutex> lk(mu_);
          auto a = active_.find(id);
          return a == active_.end() ? int64_t{0} : a->second;
        },
        cfg_.kv_weight);
    by_kv = kc.ordered;
    cached = std::move(kc.cached);
    kv_routed_ += by_kv;
    kv_moves_ += kc.moved;
    if (by_kv) kv_predicted_ += std::max<int64_t>(0, cached[order[0]]);
  }
  if (media_ && !media_->empty() && !by_kv) {  // a worker with the images encoded goes first
    const std::vector<Hash128> files = layout ? layout->files : media_files(parsed);
    std::vector<int64_t> held(workers.size(), 0);
    for (size_t i = 0; i < workers.size() && !files.empty(); ++i)
      held[i] = media_->holds(workers[i].id, files);
    if (media_order(order, held)) ++media_moves_;
  }
  if (gauges_ && !by_kv) {
    std::vector<int64_t> load(workers.size(), -1);
    for (size_t i = 0; i < workers.size(); ++i)
      if (auto g = gauges_->get(workers[i].id, 1000)) load[i] = g->running + g->waiting;
    if (balance_order(order, load, cfg_.balance_abs, cfg_.balance_rel)) ++load_overrides_;
  }
  if (order.empty()) {
    ++no_worker_;
    return ex->post([ex, model = cfg_.model] {
      if (!ex->aborted())
        ex->respond(error_response(503, "unavailable_error",
                                   "no worker serving '" + model + "' is registered"));
    });
  }
  // A streamed answer can be resumed on another worker: every worker is asked for its tokens'
  // ids (mmrt_stream_ids), and after a failure the next one continues from those the client
  // has (mmrt_resume_ids; cluster/stream_relay.h). A client resuming a stream itself is not
  // resumed again.
  const std::string* body = &req.body;
  std::string with_ids, resumed;  // the body as sent: asking for ids; continuing from them
  const bool resumable = parsed.is_object() && parsed.value("stream", false) == true &&
                         parsed.value("n", 1) == 1 && !parsed.contains("mmrt_resume_ids");
  const bool client_ids = resumable && parsed.contains("mmrt_stream_ids");
  if (resumable && !client_ids) {
    with_ids = splice_member(req.body, "mmrt_stream_ids", "true");
    body = &with_ids;
  }
  const std::string& stream_body = *body;
  StreamRelay relay(client_ids);
  bool begun = false;
  // A handle from the pool keeps its connections to the workers open between requests.
  CURL* c = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!handles_.empty()) {
      c = handles_.back();
      handles_.pop_back();
    }
  }
  if (!c && !(c = curl_easy_init()))
    throw ResourceExhausted("cannot create an HTTP client for the worker");
  curl_slist* headers = nullptr;
  for (const auto& [name, value] : req.headers)
    if (!hop_by_hop(name)) headers = curl_slist_append(headers, (name + ": " + value).c_str());
  headers = curl_slist_append(headers, "Expect:");
  std::unique_ptr<Attempt> refusal;  // the last refusal held back
  std::string errors;
  for (size_t k = 0; k < order.size(); ++k) {
    const WorkerInfo& w = workers[order[k]];
    auto a = std::make_unique<Attempt>();
    a->ex = ex;
    a->gone = gone;
    a->abort_all = &abort_all_;
    a->worker_id = w.id;
    a->predicted_cached = cached[order[k]];
    a->may_pass_on = k + 1 < order.size();
    a->relay = &relay;
    a->begun = &begun;
    const std::string url = w.url + req.target;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(cfg_.connect_timeout.count()));
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, a.get());
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, a.get());
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, a.get());
    const int64_t blocks =
        layout && w.kv_block > 0
            ? (static_cast<int64_t>(layout->ids.size()) + w.kv_block - 1) / w.kv_block
            : 0;
    if (blocks) {
      std::lock_guard<std::mutex> lk(mu_);
      active_[w.id] += blocks;
    }
    const CURLcode rc = curl_easy_perform(c);
    if (blocks) {
      std::lock_guard<std::mutex> lk(mu_);
      if ((active_[w.id] -= blocks) <= 0) active_.erase(w.id);
    }
    if (gone->load()) break;  // the client left: the closed connection cancels it on the worker
    if (rc == CURLE_OK && !a->decided) on_body(nullptr, 0, 0, a.get());  // an empty body
    if (rc == CURLE_OK && a->passing_on) {
      ++passed_on_;
      refusal = std::move(a);
      continue;
    }
    if (begun && rc != CURLE_OK && resumable && a->may_pass_on && !relay.done()) {
      // The worker failed mid-stream: the next one continues from the tokens the client has.
      relay.resume();
      resumed = splice_member(stream_body, "mmrt_resume_ids", json(relay.ids()).dump());
      body = &resumed;
      std::fprintf(stderr, "mmrt router: worker %s failed mid-stream (%s): resuming on the next\n",
                   w.id.c_str(), curl_easy_strerror(rc));
      ++passed_on_;
      ++resumed_;
      errors += (errors.empty() ? "" : "; ") + w.id + ": " + curl_easy_strerror(rc);
      continue;
    }
    if (begun && !a->streaming) {  // a resumption this worker did not take: the next, or the end
      errors += (errors.empty() ? "" : "; ") + w.id + ": " +
                (rc == CURLE_OK ? "answered " + std::to_string(a->status) : curl_easy_strerror(rc));
      continue;
    }
    if (rc != CURLE_OK && !a->streaming) {
      // Nothing of the answer reached the client: the next worker may take it.
      errors += (errors.empty() ? "" : "; ") + w.id + ": " + curl_easy_strerror(rc) +
                (a->overflow ? " (answer over 64 MiB)" : "");
      if (a->may_pass_on) ++passed_on_;
      continue;
    }
    if (a->streaming) {
      const bool ok = rc == CURLE_OK;
      if (!ok)
        std::fprintf(stderr, "mmrt router: worker %s failed mid-stream (%s), no worker left\n",
                     w.id.c_str(), curl_easy_strerror(rc));
      ok ? ++served_ : ++failed_;
      ex->post([ex, ok, id = w.id] {
        if (ex->aborted()) return;
        if (!ok) ex->write(stream_error("worker " + id + " failed in the middle of the stream"));
        ex->end_stream();
      });
    } else {
      (a->status >= 200 && a->status < 300)    ? ++served_
      : (a->status == 429 || a->status == 503) ? ++refused_
                                               : ++failed_;
      HttpResponse r = a->response_head();
      r.body = std::move(a->body);
      ex->post([ex, r = std::move(r)]() mutable {
        if (!ex->aborted()) ex->respond(std::move(r));
      });
    }
    refusal.reset();
    errors = "done";
    break;
  }
  curl_slist_free_all(headers);
  {
    std::lock_guard<std::mutex> lk(mu_);
    handles_.push_back(c);
  }
  if (gone->load() || errors == "done") return;
  if (begun) {  // a stream no worker could resume
    ++failed_;
    return ex->post([ex, errors] {
      if (ex->aborted()) return;
      ex->write(stream_error("no worker could resume the stream: " + errors));
      ex->end_stream();
    });
  }
  if (refusal) {  // every worker refused: the last refusal, as it came
    ++refused_;
    HttpResponse r = refusal->response_head();
    r.body = std::move(refusal->body);
    return ex->post([ex, r = std::move(r)]() mutable {
      if (!ex->aborted()) ex->respond(std::move(r));
    });
  }
  ++failed_;
  ex->post([ex, errors] {
    if (!ex->aborted())
      ex->respond(
          error_response(503, "unavailable_error", "no worker could be reached: " + errors));
  });
}

int run_router(RouterConfig cfg) {
  if (cfg.model.empty()) throw InvalidArgument("the router needs the model id it serves");
  check_etcd_endpoint(cfg.etcd);  // before anything starts
  curl_global_init(CURL_GLOBAL_DEFAULT);
  Router router(cfg);
  router.load_prompts();  // KV-aware routing: the model's tokenizer and processor
  server::HttpServer http(cfg.http, [&router](HttpRequest req, std::shared_ptr<Exchange> ex) {
    router.handle(std::move(req), ex);
  });
  std::thread drainer;
  http.on_signal([&](int) {
    if (drainer.joinable()) return;
    router.set_draining();
    http.stop_accepting();
    drainer = std::thread([&] {
      router.drain(cfg.drain_timeout);
      http.stop();
    });
  });
  router.start_polling();
  std::fprintf(stderr, "mmrt router: listening on http://%s:%d, workers from etcd at %s under %s\n",
               cfg.http.host.c_str(), http.port(), cfg.etcd.c_str(), cfg.prefix.c_str());
  if (cfg.on_listen) cfg.on_listen(http.port());
  http.run();
  if (drainer.joinable()) drainer.join();
  router.drain(std::chrono::milliseconds(0));
  router.stop_polling();
  return 0;
}

}  // namespace mmrt::cluster
