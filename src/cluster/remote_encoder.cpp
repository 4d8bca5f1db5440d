#include "cluster/remote_encoder.h"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>

#include "cluster/encode_protocol.h"
#include "cluster/etcd.h"
#include "cluster/routing.h"
#include "cluster/worker_info.h"
#include "core/clock.h"
#include "core/error.h"

namespace mmrt::cluster {

namespace {

constexpr size_t kMaxAnswerBytes = 64 << 20;  // the JSON answer (kept tokens at most)

size_t collect(char* p, size_t size, size_t n, void* out) {
  auto* s = static_cast<std::string*>(out);
  if (s->size() + size * n > kMaxAnswerBytes) return 0;  // libcurl fails the transfer
  s->append(p, size * n);
  return size * n;
}

// One POST /v1/encode: the status (0 when no answer came) and the body.
struct Posted {
  long status = 0;
  std::string body, error;
};

}  // namespace

struct RemoteEncoderPool::Impl {
  RemoteEncoderOptions opt;
  mutable std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::vector<WorkerInfo> view;  // from etcd and opt.urls
  std::set<std::string> logged;  // keys logged about once
  std::vector<CURL*> handles;    // idle
  std::thread poller;
  int64_t last_log_ns = 0;
  // Round trips per estimated token (ns), smoothed: what an item will take, for the deadline.
  double ns_per_token = 0;
  std::atomic<int64_t> sent{0}, encoded{0}, late{0}, failed{0}, passed_on{0};
  std::atomic<int64_t> bytes{0}, transfer_ns{0}, round_trip_ns{0}, remote_encode_ns{0};

  void log(const std::string& line, bool rate_limited) {
    {
      std::lock_guard<std::mutex> lk(mu);
      const int64_t now = now_ns();
      if (rate_limited && now - last_log_ns < 1'000'000'000) return;
      last_log_ns = now;
    }
    std::fprintf(stderr, "[mmrt] remote encoder: %s\n", line.c_str());
  }

  std::vector<WorkerInfo> fixed() const {
    std::vector<WorkerInfo> out;
    for (const std::string& u : opt.urls) {
      WorkerInfo w;
      w.id = w.url = u;
      w.role = "encode";
      w.model = opt.model;
      out.push_back(w);
    }
    return out;
  }

  void poll_loop() {
    std::unique_ptr<EtcdClient> etcd;
    bool ok = true;
    for (;;) {
      try {
        if (!etcd) etcd = std::make_unique<EtcdClient>(opt.etcd, std::chrono::milliseconds(1000));
        std::vector<WorkerInfo> next =
            list_workers(*etcd, opt.prefix, "encode", opt.model,
                         [this](const std::string& key, const std::string& why) {
                           bool first;
                           {
                             std::lock_guard<std::mutex> lk(mu);
                             first = logged.insert(key).second;
                           }
                           if (first) log(why, false);
                         });
        for (WorkerInfo& w : fixed()) next.push_back(std::move(w));
        std::lock_guard<std::mutex> lk(mu);
        if (next.size() != view.size())
          std::fprintf(stderr, "[mmrt] remote encoder: %zu encode worker(s) in view\n",
                       next.size());
        view = std::move(next);
        ok = true;
      } catch (const std::exception& e) {
        if (ok) log(std::string(e.what()) + "; encoding on the last view", false);
        ok = false;  // the last view stays
      }
      std::unique_lock<std::mutex> lk(mu);
      if (cv.wait_for(lk, opt.poll, [&] { return stop; })) return;
    }
  }

  Posted post(const WorkerInfo& w, const engine::RemoteEncodeItem& item, int64_t deadline_ns) {
    CURL* c = nullptr;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (!handles.empty()) {
        c = handles.back();
        handles.pop_back();
      }
    }
    if (!c) c = curl_easy_init();
    if (!c) return {0, "", "libcurl could not start a transfer"};
    curl_easy_reset(c);
    Posted out;
    const std::string url = w.url + "/v1/encode";
    curl_slist* h = nullptr;
    const std::string hs[] = {
        std::string("x-mmrt-modality: ") + models::modality_name(item.modality),
        "x-mmrt-model: " + item.model,
        "x-mmrt-tenant: " + item.tenant,
        "x-mmrt-media-options: " + to_json(item.options),
        "content-type: application/octet-stream",
        "expect:"};
    for (const std::string& s : hs) h = curl_slist_append(h, s.c_str());
    const int64_t left_ms = std::max<int64_t>(1, (deadline_ns - now_ns()) / 1000000);
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opt.connect_timeout.count()));
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(left_ms));
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, item.bytes.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(item.bytes.size()));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &out.body);
    const CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK)
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out.status);
    else
      out.error = curl_easy_strerror(rc);
    curl_slist_free_all(h);
    std::lock_guard<std::mutex> lk(mu);
    handles.push_back(c);
    return out;
  }
};

RemoteEncoderPool::RemoteEncoderPool(RemoteEncoderOptions opt) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opt = std::move(opt);
  if (m.opt.etcd.empty() && m.opt.urls.empty())
    throw InvalidArgument("a remote encoder needs etcd or the encode workers' URLs");
  for (const std::string& u : m.opt.urls)
    if (u.rfind("http://", 0) != 0 || u.size() <= 7)
      throw InvalidArgument("encode worker URL '" + u + "' is not http://host:port");
  if (!m.opt.etcd.empty()) check_etcd_endpoint(m.opt.etcd);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  m.view = m.fixed();
  if (!m.opt.etcd.empty()) m.poller = std::thread([&m] { m.poll_loop(); });
}

RemoteEncoderPool::~RemoteEncoderPool() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->poller.joinable()) impl_->poller.join();
  for (CURL* c : impl_->handles) curl_easy_cleanup(c);
}

std::optional<models::PreparedMedia> RemoteEncoderPool::encode(
    const engine::RemoteEncodeItem& item) {
  Impl& m = *impl_;
  const int64_t t0 = now_ns();
  std::vector<WorkerInfo> workers;
  double per_token;
  {
    std::lock_guard<std::mutex> lk(m.mu);
    workers = m.view;
    per_token = m.ns_per_token;
  }
  if (workers.empty()) return std::nullopt;
  // The recent round trips say it would arrive after the request's deadline: encode it here.
  if (item.deadline_ns > 0 && per_token > 0 &&
      t0 + per_token * static_cast<double>(item.estimated_tokens) > item.deadline_ns) {
    ++m.late;
    return std::nullopt;
  }
  const int64_t deadline = t0 + m.opt.timeout.count() * 1000000;
  ++m.sent;
  std::string errors;
  std::vector<size_t> order = rendezvous_order(item.group.lo, workers);
  std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(item.slot % order.size()),
              order.end());
  for (size_t k : order) {
    const WorkerInfo& w = workers[k];
    Posted p = m.post(w, item, deadline);
    if (p.status == 200) {
      EncodeAnswer a;
      models::PreparedMedia out;
      try {
        a = parse_encode_answer(p.body);
        if (a.width != item.width || a.region.bytes > m.opt.max_item_bytes ||
            a.item.modality != item.modality)
          throw FormatError("an item of " + std::to_string(a.rows) + " x " +
                            std::to_string(a.width) + " (" + std::to_string(a.region.bytes) +
                            " bytes) for a model of width " + std::to_string(item.width));
        out = std::move(a.item);
        out.encoded = Tensor::empty(DType::kF32, {a.rows, a.width});
        const int64_t t1 = now_ns();
        read_region(a.region,
                    std::span<uint8_t>(static_cast<uint8_t*>(out.encoded.raw()), a.region.bytes),
                    std::chrono::milliseconds(std::max<int64_t>(1, (deadline - t1) / 1000000)));
        const int64_t t2 = now_ns();
        m.transfer_ns += t2 - t1;
        m.bytes += static_cast<int64_t>(a.region.bytes);
        m.round_trip_ns += t2 - t0;
        m.remote_encode_ns += static_cast<int64_t>((a.preprocess_ms + a.encode_ms) * 1e6);
        ++m.encoded;
        if (item.estimated_tokens > 0) {
          const double x =
              static_cast<double>(t2 - t0) / static_cast<double>(item.estimated_tokens);
          std::lock_guard<std::mutex> lk(m.mu);
          m.ns_per_token = m.ns_per_token > 0 ? 0.8 * m.ns_per_token + 0.2 * x : x;
        }
      } catch (const std::exception& e) {
        ++m.failed;
        m.log("encode worker " + w.id + ": " + e.what() + "; encoding here", true);
        throw;
      }
      out.features = Tensor();
      out.encoder_cost = 0;
      return out;
    }
    // Not an answer for this item: an unreachable, busy, loading or mismatched encode worker
    // passes it to the next; a refusal of the item itself (bad media) ends here.
    errors += (errors.empty() ? "" : "; ") + w.id + ": " +
              (p.status ? "HTTP " + std::to_string(p.status) : p.error);
    const bool pass_on = p.status == 0 || p.status == 503 || p.status == 409 || p.status == 404;
    if (p.status == 409) {
      bool first;
      {
        std::lock_guard<std::mutex> lk(m.mu);
        first = m.logged.insert("409 " + w.id).second;
      }
      if (first) m.log("encode worker " + w.id + " computes with another model: " + p.body, false);
    }
    if (!pass_on || now_ns() >= deadline) break;
    ++m.passed_on;
  }
  ++m.failed;
  m.log(errors + "; encoding here", true);
  throw Unavailable("no encode worker encoded the item: " + errors);
}

std::string RemoteEncoderPool::metrics() const {
  const Impl& m = *impl_;
  size_t workers;
  {
    std::lock_guard<std::mutex> lk(m.mu);
    workers = m.view.size();
  }
  std::string out;
  auto line = [&](const char* name, const char* type, const char* help, double v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + std::to_string(v) + "\n";
  };
  line("mmrt_remote_encode_workers", "gauge", "Encode workers in view.",
       static_cast<double>(workers));
  line("mmrt_remote_encode_sent_total", "counter", "Media items sent to encode workers.",
       static_cast<double>(m.sent.load()));
  line("mmrt_remote_encode_late_total", "counter",
       "Media items encoded here because a round trip would miss their deadline.",
       static_cast<double>(m.late.load()));
  line("mmrt_remote_encode_passed_on_total", "counter",
       "Items passed to the next encode worker (one unreachable, busy or of another model).",
       static_cast<double>(m.passed_on.load()));
  line("mmrt_remote_encode_transfer_bytes_total", "counter",
       "Encoder output bytes read from encode workers.", static_cast<double>(m.bytes.load()));
  line("mmrt_remote_encode_transfer_seconds_total", "counter",
       "Time reading encoder outputs from encode workers.", m.transfer_ns.load() * 1e-9);
  line("mmrt_remote_encode_round_trip_seconds_total", "counter",
       "Time from sending an item to holding its encoder output.", m.round_trip_ns.load() * 1e-9);
  line("mmrt_remote_encode_worker_seconds_total", "counter",
       "Of that, the encode workers' decoding and encoding.", m.remote_encode_ns.load() * 1e-9);
  return out;
}

}  // namespace mmrt::cluster
