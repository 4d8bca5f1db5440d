// /health and /metrics of `mmrt router`.
#include <nlohmann/json.hpp>

#include "cluster/router_impl.h"
#include "core/clock.h"

namespace mmrt::cluster {

using nlohmann::json;

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
        if (auto g = gauges_->get(w.id, 1000)) {
          json ahead = json::object();  // the class's quoted queue (cluster/ttft_quote.h)
          for (const auto& c : g->quote.classes) ahead[c.name] = c.ahead_ms;
          loads[w.id] = {{"running", g->running},
                         {"waiting", g->waiting},
                         {"kv_usage", g->kv_usage},
                         {"ahead_ms", std::move(ahead)}};
        }
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
    metric("mmrt_router_ttft_predicted_total", "counter",
           "Requests the router predicted a first token for on the worker it tried first, or "
           "refused from the workers' quotes.",
           static_cast<double>(ttft_predicted_.load()));
    metric("mmrt_router_ttft_moves_total", "counter",
           "Requests sent first to another worker because the first in cost order was predicted "
           "to miss their class.",
           static_cast<double>(ttft_moves_.load()));
    metric("mmrt_router_ttft_refused_total", "counter",
           "Requests the router refused at once: no worker was predicted to meet their class.",
           static_cast<double>(ttft_refused_.load()));
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

}  // namespace mmrt::cluster
