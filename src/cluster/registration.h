// A worker's membership: its WorkerInfo under `prefix + id` in etcd, attached to a lease of
// `ttl_s` seconds that a thread of its own renews every ttl/2. The key goes when the lease
// does, so a worker that dies or freezes past its TTL leaves the cluster by itself. A worker
// that etcd says has lost its lease (frozen past the TTL, cut off from etcd) is not serving
// until it has taken a new lease and written its key again. While etcd cannot be reached at
// all it goes on serving (etcd keeps leases across its own restarts; the router stops sending
// here if the key goes) and asks again every `retry`.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "cluster/worker_info.h"

namespace mmrt::cluster {

struct RegistrationOptions {
  std::string etcd;                       // http://host:port
  std::string prefix = "/mmrt/workers/";  // the router watches the same prefix
  int64_t ttl_s = 3;
  std::chrono::milliseconds retry{250};
};

class Registration {
 public:
  // Starts registering at once (not serving until the first put succeeds). `log` gets a line
  // for every change of state (called on the registration's thread).
  Registration(RegistrationOptions opt, WorkerInfo self,
               std::function<void(const std::string&)> log);
  ~Registration();  // revokes the lease (the key goes at once) and stops the thread

  bool serving() const { return serving_.load(); }
  // Why it is not serving ("" while it is).
  std::string reason() const;

 private:
  void run();
  void set(bool serving, const std::string& why);

  RegistrationOptions opt_;
  WorkerInfo self_;
  std::function<void(const std::string&)> log_;
  std::atomic<bool> serving_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string reason_ = "not yet registered in the cluster";
  std::thread thread_;
};

}  // namespace mmrt::cluster
