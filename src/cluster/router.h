// `mmrt router`: the OpenAI API of `mmrt serve` in front of the workers registered in etcd
// (docs/scale-out.md). It reads the workers under the cluster's prefix every `poll` and keeps
// those serving its model (a bad value, or a worker of another model, is ignored with a log
// line); when etcd cannot be reached it keeps serving from its last view and says so in /health
// and /metrics. A completion request goes to the first worker in rendezvous order for its
// affinity key (cluster/routing.h) that takes it: a worker's 429 or 503, or a connection that
// fails before any byte of the answer, passes the request to the next worker; when none takes
// it the client gets the last refusal (429 with its reason and Retry-After) at once. Answers,
// streamed or whole, are relayed as they come, with `x-mmrt-worker` naming the worker; a client
// that goes away cancels the request on its worker (the connection to it is closed); a stream
// whose worker fails mid-way continues on the next from the tokens the client has
// (cluster/stream_relay.h). With NATS,
// the workers' load gauges (cluster/load_gauges.h) move a request off its affinity worker when
// that one is far busier than another; with the model's checkpoint as well, the router computes
// each request's prefix-cache block keys and sends it where Dynamo's cost (blocks to prefill and
// blocks decoding) is lowest, from the keys each worker publishes (cluster/cache_events.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "server/http.h"

namespace mmrt::cluster {

struct RouterConfig {
  std::string etcd;                       // http://host:port
  std::string prefix = "/mmrt/workers/";  // where workers register
  std::string model;                      // the model id it serves (workers of others: unused)
  server::HttpOptions http;
  std::chrono::milliseconds poll{200};
  std::chrono::milliseconds connect_timeout{1000};  // to a worker
  std::chrono::milliseconds drain_timeout{10000};   // at SIGTERM: requests in flight finish
  int64_t max_in_flight = 1024;                     // requests relayed at once (503 beyond)
  std::string nats;  // nats://host:port of the workers' load gauges ("": affinity order only)
  int64_t balance_abs = 8;  // the load override's thresholds (routing.h, balance_order)
  double balance_rel = 2.0;
  // KV-aware routing (with NATS): the checkpoint whose tokenizer and processor lay prompts out
  // as the workers do (cluster/prompt_blocks.h; "": off), the workers' key file and SLA classes
  // ("": open, built-in), and Dynamo's weight on the blocks to prefill (routing.h, kv_order).
  std::string model_dir, api_keys_file, sla_file;
  double kv_weight = 1.0;
  std::function<void(int port)> on_listen;
};

// Runs until SIGINT / SIGTERM; returns the exit code.
int run_router(RouterConfig cfg);

}  // namespace mmrt::cluster
