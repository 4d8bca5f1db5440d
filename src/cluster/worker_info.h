// What a worker announces about itself in etcd (the value of its key under the cluster's
// prefix, JSON): where to send requests, its role, the model it serves, its SLA classes and
// how many requests it takes at once. Values come from other processes: parsing checks every
// field and its size, and a bad one is refused with the field named.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mmrt::cluster {

struct WorkerInfo {
  std::string id;   // unique per worker process (etcd key suffix)
  std::string url;  // http://host:port the router sends requests to
  // "both": prefill and decode, encoders colocated (takes completion requests); "encode": media
  // preprocessing and encoders only (cluster/encode_worker.h), used by the other workers.
  std::string role = "both";
  std::string model;                 // the model id it serves (/v1/models)
  std::vector<std::string> classes;  // its SLA classes
  int64_t capacity = 0;              // requests it takes at once
  // Its prefix cache's keys (engine/kv_manager.h), for a router that predicts them: tokens per
  // KV block (0: it publishes no KV events) and the encoder precision in its media keys.
  int64_t kv_block = 0;
  std::string encoder;
};

std::string to_json(const WorkerInfo& w);
// FormatError naming the field for anything else than what to_json writes (unknown fields are
// ignored: a newer worker may say more).
WorkerInfo parse_worker_info(std::string_view json);

class EtcdClient;
// The workers under `prefix` of `role` serving `model`, by id. A value that does not parse, or
// a worker of that role serving another model, is passed over: `ignored(key, why)` says why
// (a caller logs it once per key).
std::vector<WorkerInfo> list_workers(
    EtcdClient& etcd, const std::string& prefix, const std::string& role, const std::string& model,
    const std::function<void(const std::string& key, const std::string& why)>& ignored);

}  // namespace mmrt::cluster
