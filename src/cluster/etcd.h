// A client of etcd's v3 API through its JSON gateway (POST /v3/<service>/<method>; keys and
// values travel base64-encoded, 64-bit numbers as strings): leases, keys under a lease, reads
// by prefix. Blocking calls, each within a time limit, over one reused connection (libcurl);
// one client per thread. Failures throw Unavailable naming the endpoint and the call; an answer
// that is not what the API documents throws FormatError.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mmrt::cluster {

struct KeyValue {
  std::string key, value;
  int64_t lease = 0;
  int64_t mod_revision = 0;
};

class EtcdClient {
 public:
  // `endpoint`: http://host:port of an etcd member's client URL.
  explicit EtcdClient(std::string endpoint,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(1000));
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  // A new lease of `ttl_s` seconds: its id.
  int64_t grant_lease(int64_t ttl_s);
  // Renews the lease once: its remaining TTL in seconds, 0 when etcd no longer has it.
  int64_t keep_alive(int64_t lease);
  void revoke(int64_t lease);
  // Writes key = value, attached to `lease` (0: none; the key then outlives its writer).
  void put(const std::string& key, const std::string& value, int64_t lease = 0);
  // Every key starting with `prefix`, in key order.
  std::vector<KeyValue> get_prefix(const std::string& prefix);
  void remove(const std::string& key);

  struct Impl;

 private:
  std::string endpoint_;
  std::unique_ptr<Impl> impl_;
};

// InvalidArgument unless `endpoint` has the form EtcdClient takes (http://host:port): callers
// check it before they start anything that will talk to etcd.
void check_etcd_endpoint(const std::string& endpoint);

// The end of the key range that holds exactly the keys starting with `prefix` (etcd's
// range_end: the prefix with its last byte incremented, carries dropped; "\0" for everything).
std::string prefix_range_end(const std::string& prefix);

}  // namespace mmrt::cluster
