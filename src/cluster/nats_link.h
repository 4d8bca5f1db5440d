// A connection to NATS as the cluster uses it (libnats): reconnecting by itself, forever, every
// 250 ms, and starting even while the server is not up yet (it connects when it answers).
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <mutex>
#include <set>
#include <string>

namespace mmrt::cluster {

// Unavailable naming `url` and `what` when the options are refused or the URL is bad.
natsConnection* nats_connect(const std::string& url, const std::string& what);

// A connection with one subscription (`handler(closure)` for every message on `subject`,
// wildcards allowed), both closed on destruction. Unavailable when it cannot subscribe.
class NatsListener {
 public:
  NatsListener(const std::string& url, const std::string& what, const std::string& subject,
               natsMsgHandler handler, void* closure);
  ~NatsListener();
  NatsListener(const NatsListener&) = delete;
  NatsListener& operator=(const NatsListener&) = delete;
  natsConnection* connection() const { return nc_; }

 private:
  natsConnection* nc_ = nullptr;
  natsSubscription* sub_ = nullptr;
};

// Messages passed over: counted, and each reason logged once per subject (1,024 remembered).
class IgnoredLog {
 public:
  explicit IgnoredLog(std::string what) : what_(std::move(what)) {}
  void add(const std::string& subject, const std::string& why);
  int64_t count() const { return count_.load(); }

 private:
  std::string what_;
  std::atomic<int64_t> count_{0};
  std::mutex mu_;
  std::set<std::string> logged_;
};

}  // namespace mmrt::cluster
