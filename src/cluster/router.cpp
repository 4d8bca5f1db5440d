// `mmrt router`: relaying requests (router_status.cpp answers /health and /metrics).
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cluster/attempt.h"
#include "cluster/etcd.h"
#include "cluster/router_impl.h"
#include "cluster/routing.h"
#include "cluster/stream_relay.h"
#include "core/clock.h"
#include "core/hash.h"
#include "engine/cost_model.h"
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
  // (Laid out even while no worker holds a block: admission prices the request's own work.)
  std::optional<PromptLayout> layout;
  if (prompts_) layout = prompts_->layout(req.path(), parsed, auth);
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
  // Each worker's latest gauge (its load and admission's quote), read once for both uses.
  std::vector<std::optional<GaugeBoard::Reading>> gauge(workers.size());
  for (size_t i = 0; i < workers.size() && gauges_; ++i)
    gauge[i] = gauges_->read(workers[i].id, 1000);
  if (gauges_ && !by_kv) {
    std::vector<int64_t> load(workers.size(), -1);
    for (size_t i = 0; i < workers.size(); ++i)
      if (gauge[i]) load[i] = gauge[i]->g.running + gauge[i]->g.waiting;
    if (balance_order(order, load, cfg_.balance_abs, cfg_.balance_rel)) ++load_overrides_;
  }
  std::vector<WorkerTtft> pred(workers.size());  // the router's predicted first token, per worker
  if (!admit(req, parsed, layout, cached, workers, gauge, order, pred, ex)) return;
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
    int64_t sent_ns = 0;  // when its own work went into this worker's queue here (0: not known)
    if (pred[order[k]].known) {
      a->predicted_ttft_ms = pred[order[k]].total_ms();
      sent_ns = now_ns();
      sent_.add(w.id, sent_ns, pred[order[k]].own_ms);  // in its quotes from the next one
    }
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
    // Refused, failed or answered in error before streaming: it never queued there.
    if (sent_ns && !a->streaming && !(rc == CURLE_OK && a->status >= 200 && a->status < 300))
      sent_.take_back(w.id, sent_ns);
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

bool Router::admit(const HttpRequest& req, const json& parsed,
                   const std::optional<PromptLayout>& layout, const std::vector<int64_t>& cached,
                   const std::vector<WorkerInfo>& workers,
                   const std::vector<std::optional<GaugeBoard::Reading>>& gauge,
                   std::vector<size_t>& order, std::vector<WorkerTtft>& pred,
                   const std::shared_ptr<Exchange>& ex) {
  if (!gauges_ || order.empty()) return true;
  const std::optional<Promise> promise = book_->promise(parsed, req.header("authorization"));
  if (!promise) return true;
  std::vector<std::string> ids(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerInfo& w = workers[i];
    ids[i] = w.id;
    const auto& reading = gauge[i];
    if (!reading) continue;
    OwnWork own;  // known when the router lays prompts out; else the queue alone
    if (layout) {
      const auto held = static_cast<double>(std::max<int64_t>(0, cached[i]));
      own.tokens = static_cast<double>(layout->ids.size()) - held;
      own.pairs = engine::causal_pairs(held, static_cast<double>(layout->ids.size()));
      for (size_t j = 0; j < layout->items.size(); ++j)
        if (!media_ || media_->holds(w.id, std::span(&layout->files[j], 1)) == 0) {
          own.patches += static_cast<double>(layout->items[j].encoder_cost);
          own.items += 1;
        }
    }
    pred[i] =
        predict_ttft(reading->g.quote, promise->cls, static_cast<double>(reading->age_ns) * 1e-6,
                     sent_.since(w.id, reading->at_ns), own);
  }
  const TtftChoice c = ttft_order(order, pred, ids, *promise, *book_, layout.has_value());
  ttft_predicted_ += c.front_ms >= 0 || c.refuse;
  ttft_moves_ += c.moved;
  if (!c.refuse) return true;
  ++refused_;
  ++ttft_refused_;
  server::ApiError e(429, "rate_limit_error", c.reason, "", "sla_unattainable");
  e.retry_after_s = c.retry_after_s;
  ex->post([ex, r = server::api_error_response(e)]() mutable {
    if (!ex->aborted()) ex->respond(std::move(r));
  });
  return false;
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
