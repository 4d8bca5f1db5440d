#include "cluster/registration.h"

#include "cluster/etcd.h"
#include "core/clock.h"
#include "core/error.h"

namespace mmrt::cluster {

Registration::Registration(RegistrationOptions opt, WorkerInfo self,
                           std::function<void(const std::string&)> log)
    : opt_(std::move(opt)), self_(std::move(self)), log_(std::move(log)) {
  if (opt_.ttl_s < 1) throw InvalidArgument("the cluster lease TTL must be at least 1 s");
  check_etcd_endpoint(opt_.etcd);  // before a thread starts
  thread_ = std::thread([this] { run(); });
}

Registration::~Registration() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string Registration::reason() const {
  std::lock_guard<std::mutex> lk(mu_);
  return reason_;
}

void Registration::set(bool serving, const std::string& why) {
  const bool was = serving_.exchange(serving);
  {
    std::lock_guard<std::mutex> lk(mu_);
    reason_ = serving ? "" : why;
  }
  if (was != serving && log_) log_(serving ? "registered in the cluster as " + self_.id : why);
}

void Registration::run() {
  EtcdClient etcd(opt_.etcd, std::chrono::milliseconds(std::max<int64_t>(250, opt_.ttl_s * 300)));
  const std::string key = opt_.prefix + self_.id, value = to_json(self_);
  const int64_t ttl_ns = opt_.ttl_s * 1'000'000'000;
  int64_t lease = 0, renewed_ns = 0;
  std::string last_error;
  for (;;) {
    std::chrono::milliseconds wait = opt_.retry;
    try {
      if (lease == 0) {
        lease = etcd.grant_lease(opt_.ttl_s);
        etcd.put(key, value, lease);
        renewed_ns = now_ns();
        set(true, "");
      } else if (etcd.keep_alive(lease) > 0) {
        renewed_ns = now_ns();
      } else {
        lease = 0;
        set(false, "the cluster lease lapsed (etcd no longer has it): registering again");
        continue;
      }
      wait = std::chrono::milliseconds(opt_.ttl_s * 500);
      last_error.clear();
    } catch (const std::exception& e) {
      // etcd unreachable: the lease may live on (etcd keeps leases across its own restarts),
      // and the router stops sending here by itself if the key goes. The worker goes on
      // serving what reaches it and learns its lease's fate when etcd answers again.
      if (e.what() != last_error && log_)
        log_(std::string("cluster: ") + e.what() +
             (lease != 0 && now_ns() - renewed_ns >= ttl_ns ? " (lease not renewed for its TTL)"
                                                            : ""));
      last_error = e.what();
    }
    std::unique_lock<std::mutex> lk(mu_);
    if (cv_.wait_for(lk, wait, [&] { return stop_; })) break;
  }
  if (lease != 0) {
    try {
      etcd.revoke(lease);
    } catch (const std::exception&) {
      // The key goes with the lease's TTL anyway.
    }
  }
}

}  // namespace mmrt::cluster
