#include "cluster/encode_worker.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>

#include "cluster/encode_protocol.h"
#include "cluster/etcd.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/hash.h"
#include "kernels/registry.h"
#include "models/registry.h"
#include "server/api.h"
#include "server/service.h"

namespace mmrt::cluster {

using server::Exchange;
using server::HttpRequest;
using server::HttpResponse;

namespace {

HttpResponse error(int status, const std::string& type, const std::string& msg) {
  return server::api_error_response(server::ApiError(status, type, msg));
}

struct Job {
  models::Modality modality = models::Modality::kImage;
  models::MediaOptions options;
  std::string tenant;
  std::string bytes;
  int64_t arrival_ns = 0;
  std::shared_ptr<Exchange> ex;
};

}  // namespace

class EncodeWorker {
 public:
  explicit EncodeWorker(EncodeWorkerConfig cfg) : cfg_(std::move(cfg)) {
    TransferAgentOptions t = cfg_.transfer;
    t.host = cfg_.http.host == "0.0.0.0" ? "127.0.0.1" : cfg_.http.host;
    if (cfg_.fault == "exit-before-transfer") {
      t.before_read = [] {
        std::fprintf(stderr, "mmrt encode worker: fault: exit before transfer\n");
        ::kill(::getpid(), SIGKILL);
      };
    } else if (!cfg_.fault.empty()) {
      throw InvalidArgument("unknown fault '" + cfg_.fault + "' (exit-before-transfer)");
    }
    agent_ = std::make_unique<TransferAgent>(t);
  }
  ~EncodeWorker() { stop(); }

  void start(const std::string& url) {
    compute_ = std::thread([this, url] { run(url); });
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (compute_.joinable()) compute_.join();
    registration_.reset();
  }
  bool failed() const { return failed_.load(); }

  void handle(HttpRequest req, const std::shared_ptr<Exchange>& ex) {
    const std::string path = req.path();
    if (path == "/health") return ex->respond(health());
    if (path == "/metrics") {
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4";
      r.body = metrics();
      return ex->respond(std::move(r));
    }
    if (path != "/v1/encode")
      return ex->respond(
          error(404, "not_found_error", "no route " + path + " on an encode worker"));
    if (req.method != "POST")
      return ex->respond(error(405, "invalid_request_error", "POST /v1/encode"));
    if (!ready_) return ex->respond(error(503, "unavailable_error", "the model is loading"));
    const std::string* model = req.header("x-mmrt-model");
    if (!model || *model != identity_)
      return ex->respond(error(409, "invalid_request_error",
                               "this encode worker computes with " + identity_ + ", not " +
                                   (model ? model->substr(0, 80) : std::string("(none)"))));
    Job job;
    try {
      const std::string* mod = req.header("x-mmrt-modality");
      job.modality = parse_modality(mod ? *mod : "");
      if (const std::string* o = req.header("x-mmrt-media-options"))
        job.options = parse_media_options(*o);
    } catch (const Error& e) {
      return ex->respond(error(400, "invalid_request_error", e.what()));
    }
    if (const std::string* t = req.header("x-mmrt-tenant")) job.tenant = t->substr(0, 256);
    job.bytes = std::move(req.body);
    job.arrival_ns = req.arrival_ns;
    job.ex = ex;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (static_cast<int64_t>(queue_.size()) >= cfg_.max_queue) {
        ++busy_;
        return ex->respond(
            error(503, "unavailable_error",
                  "the encode queue is full (" + std::to_string(cfg_.max_queue) + " items)"));
      }
      queue_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  HttpResponse health() const {
    HttpResponse r;
    std::string why;
    if (failed_)
      why = "the model failed to load";
    else if (!ready_)
      why = "loading";
    else if (registration_ && !registration_->serving())
      why = "this worker is out of the cluster: " + registration_->reason();
    std::lock_guard<std::mutex> lk(mu_);
    r.status = why.empty() ? 200 : 503;
    r.body =
        nlohmann::json{
            {"status", why.empty() ? "ok" : why}, {"role", "encode"}, {"queue", queue_.size()}}
            .dump();
    return r;
  }

  std::string metrics() const {
    std::string out;
    auto line = [&](const char* name, const char* type, const char* help, double v) {
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
             name + " " + std::to_string(v) + "\n";
    };
    const TransferAgentStats t = agent_->stats();
    std::lock_guard<std::mutex> lk(mu_);
    line("mmrt_encode_items_total", "counter", "Media items encoded for other workers.",
         static_cast<double>(encoded_));
    line("mmrt_encode_failed_total", "counter", "Items whose decoding or encoding failed.",
         static_cast<double>(failed_items_));
    line("mmrt_encode_cache_hits_total", "counter",
         "Items answered from the encode worker's cache (encoded before for the same tenant).",
         static_cast<double>(cache_hits_));
    line("mmrt_encode_busy_total", "counter", "Items refused because the queue was full.",
         static_cast<double>(busy_));
    line("mmrt_encode_queue", "gauge", "Items waiting.", static_cast<double>(queue_.size()));
    line("mmrt_encode_queue_seconds_total", "counter", "Time items waited.", queue_ns_ * 1e-9);
    line("mmrt_encode_preprocess_seconds_total", "counter", "Time spent decoding media.",
         preprocess_ns_ * 1e-9);
    line("mmrt_encode_encoder_seconds_total", "counter", "Time spent in the encoders.",
         encode_ns_ * 1e-9);
    line("mmrt_transfer_regions_read_total", "counter", "Regions read by other workers.",
         static_cast<double>(t.read));
    line("mmrt_transfer_regions_expired_total", "counter",
         "Regions released unread (their reader never notified).", static_cast<double>(t.expired));
    line("mmrt_transfer_bytes_sent_total", "counter", "Bytes read by other workers.",
         static_cast<double>(t.bytes_sent));
    line("mmrt_transfer_held_bytes", "gauge", "Bytes registered and not yet released.",
         static_cast<double>(t.held_bytes));
    return out;
  }

  void run(const std::string& url) {
    try {
      be_ = kernels::create_backend(cfg_.device, cfg_.backend);
      host_ = std::make_unique<media::HostContext>(cfg_.host);
      models::LoadOptions lo = cfg_.model;
      lo.encoders_only = true;  // no language model: its weights never leave the file
      model_ = models::load_model(*be_, cfg_.model_dir, lo);
      if (cfg_.sandbox.enabled) {
        sandbox::MediaSandboxConfig sc = cfg_.sandbox;
        sc.model_dir = cfg_.model_dir;
        sc.isa = host_->isa();
        sandbox_ = std::make_unique<sandbox::MediaSandbox>(sc, 1);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mmrt encode worker: the model failed to load: %s\n", e.what());
      failed_ = true;
      return;
    }
    identity_ = model_.spec.encoder_identity();
    std::fprintf(stderr, "mmrt encode worker: %s loaded (%s), encoding at %s, transfers at %s\n",
                 cfg_.model_dir.c_str(), identity_.c_str(), url.c_str(), agent_->address().c_str());
    if (!cfg_.registration.etcd.empty()) {
      WorkerInfo self;
      self.url = url;
      self.id = url.substr(7) + "-" + std::to_string(::getpid());
      self.role = "encode";
      self.model = cfg_.model_id;
      self.capacity = cfg_.max_queue;
      registration_ = std::make_unique<Registration>(
          cfg_.registration, self,
          [](const std::string& line) { std::fprintf(stderr, "[mmrt] %s\n", line.c_str()); });
    }
    ready_ = true;
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      if (job.ex->aborted()) continue;  // the asking worker gave up
      HttpResponse r = encode(job);
      job.ex->post([ex = job.ex, r = std::move(r)]() mutable {
        if (!ex->aborted()) ex->respond(std::move(r));
      });
    }
  }

  // An item's cache key: its bytes, modality and options and whose it is (tenants never share
  // an entry: a hit would tell one tenant what another sent).
  static Hash128 cache_key(const Job& job) {
    Hasher h;
    h.update(job.bytes).update(models::modality_name(job.modality));
    h.update(to_json(job.options)).update(job.tenant);
    return h.digest();
  }

  HttpResponse encode(const Job& job) {
    const int64_t t0 = now_ns();
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(job.bytes.data()),
                                         job.bytes.size());
    EncodeAnswer a;
    const Hash128 key = cache_key(job);
    if (auto hit = cache_.find(key); hit != cache_.end()) {  // encoded before: registered again
      lru_.splice(lru_.end(), lru_, hit->second.lru);
      a = hit->second.answer;
      try {
        a.region = agent_->register_memory(hit->second.bytes);
      } catch (const Error& e) {
        return server::api_error_response(server::from_error_code(e.code(), e.what()));
      }
      a.queue_ms = static_cast<double>(t0 - job.arrival_ns) * 1e-6;
      a.preprocess_ms = a.encode_ms = 0;
      std::lock_guard<std::mutex> lk(mu_);
      ++encoded_;
      ++cache_hits_;
      HttpResponse r;
      r.body = to_json(a);
      return r;
    }
    try {
      const models::Processor& proc = *model_.processor;
      if (sandbox_) {
        sandbox::Job sj;
        sj.modality = job.modality;
        sj.bytes = bytes;
        sj.tenant = job.tenant;
        sj.estimate = proc.estimate(job.modality, bytes, job.options);
        sj.options = job.options;
        a.item = sandbox_->preprocess(0, sj);
      } else {
        a.item = proc.preprocess(job.modality, bytes, host_->media_context(), job.options);
      }
      const int64_t t1 = now_ns();
      const Tensor out = be_->to_host(model_.runner->encode(a.item)).contiguous();
      const int64_t t2 = now_ns();
      a.item.features = Tensor();
      a.rows = out.dim(0);
      a.width = out.dim(1);
      auto mem = std::make_shared<std::vector<uint8_t>>(out.nbytes());
      std::memcpy(mem->data(), out.raw(), out.nbytes());
      a.region = agent_->register_memory(mem);
      remember(key, a, std::move(mem));
      a.queue_ms = static_cast<double>(t0 - job.arrival_ns) * 1e-6;
      a.preprocess_ms = static_cast<double>(t1 - t0) * 1e-6;
      a.encode_ms = static_cast<double>(t2 - t1) * 1e-6;
      std::lock_guard<std::mutex> lk(mu_);
      ++encoded_;
      queue_ns_ += t0 - job.arrival_ns;
      preprocess_ns_ += t1 - t0;
      encode_ns_ += t2 - t1;
    } catch (const Error& e) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        ++failed_items_;
      }
      return server::api_error_response(server::from_error_code(e.code(), e.what()));
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        ++failed_items_;
      }
      return error(500, "server_error", e.what());
    }
    HttpResponse r;
    r.body = to_json(a);
    return r;
  }

  // Keeps an encoded item for later askers, least recently used first out past the budget.
  void remember(const Hash128& key, const EncodeAnswer& a,
                std::shared_ptr<const std::vector<uint8_t>> mem) {
    const uint64_t size = mem->size();
    if (size > cfg_.cache_bytes) return;
    while (cache_held_ + size > cfg_.cache_bytes && !lru_.empty()) {
      auto it = cache_.find(lru_.front());
      cache_held_ -= it->second.bytes->size();
      cache_.erase(it);
      lru_.pop_front();
    }
    lru_.push_back(key);
    cache_[key] = {a, std::move(mem), std::prev(lru_.end())};
    cache_held_ += size;
  }

  EncodeWorkerConfig cfg_;
  std::unique_ptr<TransferAgent> agent_;
  struct Cached {
    EncodeAnswer answer;  // the item's layout (its region is registered anew per asker)
    std::shared_ptr<const std::vector<uint8_t>> bytes;
    std::list<Hash128>::iterator lru;
  };
  std::unordered_map<Hash128, Cached, Hash128Hasher> cache_;  // the compute thread's
  std::list<Hash128> lru_;
  uint64_t cache_held_ = 0;
  std::unique_ptr<kernels::Backend> be_;
  std::unique_ptr<media::HostContext> host_;
  models::Model model_;
  std::unique_ptr<sandbox::MediaSandbox> sandbox_;
  std::unique_ptr<Registration> registration_;
  std::string identity_;  // set before ready_
  std::atomic<bool> ready_{false}, failed_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  int64_t encoded_ = 0, failed_items_ = 0, busy_ = 0, cache_hits_ = 0;
  int64_t queue_ns_ = 0, preprocess_ns_ = 0, encode_ns_ = 0;
  std::thread compute_;
};

int run_encode_worker(EncodeWorkerConfig cfg) {
  if (!cfg.registration.etcd.empty()) check_etcd_endpoint(cfg.registration.etcd);
  EncodeWorker worker(cfg);
  server::HttpServer http(cfg.http, [&worker](HttpRequest req, std::shared_ptr<Exchange> ex) {
    worker.handle(std::move(req), ex);
  });
  std::string url = cfg.advertise_url;
  if (url.empty()) {
    if (cfg.http.host == "0.0.0.0" || cfg.http.host == "::")
      throw InvalidArgument("--advertise-url is needed with --host " + cfg.http.host);
    url = "http://" + cfg.http.host + ":" + std::to_string(http.port());
  }
  http.on_signal([&](int) { http.stop(); });
  std::fprintf(stderr, "mmrt encode worker: listening on http://%s:%d\n", cfg.http.host.c_str(),
               http.port());
  if (cfg.on_listen) cfg.on_listen(http.port());
  worker.start(url);
  http.run();
  worker.stop();
  return worker.failed() ? 1 : 0;
}

}  // namespace mmrt::cluster
