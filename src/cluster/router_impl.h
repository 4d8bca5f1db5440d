// The router's state (internal to the router: router.cpp relays requests, router_status.cpp
// answers /health and /metrics).
#pragma once

#include <curl/curl.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/cache_events.h"
#include "cluster/load_gauges.h"
#include "cluster/prompt_blocks.h"
#include "cluster/router.h"
#include "cluster/ttft_quote.h"
#include "cluster/worker_info.h"
#include "core/error.h"

namespace mmrt::cluster {

using server::Exchange;
using server::HttpRequest;
using server::HttpResponse;

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
  // Loads the workers' keys and classes, and the checkpoint's tokenizer and processor for
  // KV-aware routing (before listening).
  void load_prompts() {
    book_ = std::make_unique<ClassBook>(cfg_.model, cfg_.api_keys_file, cfg_.sla_file);
    if (cfg_.model_dir.empty()) return;
    if (cfg_.nats.empty())
      throw InvalidArgument(
          "--model (KV-aware routing) needs --nats: the workers' prefix-cache "
          "keys come over NATS");
    prompts_ = std::make_unique<PromptBlocks>(cfg_.model_dir, *book_);
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
  // Admission at the router (cluster/ttft_quote.h): each worker's predicted first token for
  // the request from its gauge (`gauge[i]`; unknown without a quote), `order` moved to the
  // first that meets its promise; false, with the refusal sent, when none can and its class
  // refuses.
  bool admit(const HttpRequest& req, const nlohmann::json& parsed,
             const std::optional<PromptLayout>& layout, const std::vector<int64_t>& cached,
             const std::vector<WorkerInfo>& workers,
             const std::vector<std::optional<GaugeBoard::Reading>>& gauge,
             std::vector<size_t>& order, std::vector<WorkerTtft>& pred,
             const std::shared_ptr<Exchange>& ex);
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
  std::unique_ptr<ClassBook> book_;
  std::unique_ptr<PromptBlocks> prompts_;  // with book_
  std::unique_ptr<CacheBoard> kv_;         // with gauges_ and prompts_
  std::atomic<int64_t> kv_routed_{0}, kv_moves_{0}, kv_predicted_{0};
  // The KV blocks of the prompts this router has in flight on each worker (Dynamo's active
  // blocks, the decode term of its cost: counted here as requests start and end, not from a
  // gauge that lags by its period). Under mu_.
  std::map<std::string, int64_t> active_;
  std::atomic<int64_t> media_moves_{0};
  SentWork sent_;  // own work sent to each worker (with gauges_: what its quote lacks)
  std::atomic<int64_t> ttft_predicted_{0}, ttft_moves_{0}, ttft_refused_{0};
  std::vector<CURL*> handles_;  // idle libcurl handles (at most max_in_flight)
  std::atomic<int64_t> load_overrides_{0};
  std::thread poller_;
};

}  // namespace mmrt::cluster
