// What a worker announces about itself in etcd (the value of its key under the cluster's
// prefix, JSON): where to send requests, its role, the model it serves, its SLA classes and
// how many requests it takes at once. Values come from other processes: parsing checks every
// field and its size, and a bad one is refused with the field named.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mmrt::cluster {

struct WorkerInfo {
  std::string id;                    // unique per worker process (etcd key suffix)
  std::string url;                   // http://host:port the router sends requests to
  std::string role = "both";         // "both": prefill and decode, encoders colocated
  std::string model;                 // the model id it serves (/v1/models)
  std::vector<std::string> classes;  // its SLA classes
  int64_t capacity = 0;              // requests it takes at once
};

std::string to_json(const WorkerInfo& w);
// FormatError naming the field for anything else than what to_json writes (unknown fields are
// ignored: a newer worker may say more).
WorkerInfo parse_worker_info(std::string_view json);

}  // namespace mmrt::cluster
