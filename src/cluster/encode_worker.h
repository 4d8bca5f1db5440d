// `mmrt serve --role encode`: a worker that runs media preprocessing and the model's encoders
// for the other workers and nothing else (no KV cache, no decoding). It listens before the
// model loads (/health 503 until it has), registers in etcd with role "encode" once loaded, and
// answers `POST /v1/encode` (cluster/encode_protocol.h): the item is decoded (in the media
// sandbox when it is on), encoded on the compute backend, its output registered with the
// worker's transfer agent (cluster/transfer.h) and described in the answer; the asking worker
// reads it from there. Items are encoded one at a time in arrival order; past `max_queue`
// waiting it answers 503 (the asking worker then encodes the item itself). Encoded items are
// kept (per tenant, `cache_bytes`) for whichever worker asks for the same item again. /metrics
// counts items, failures, the time each stage took and the agent's bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "cluster/registration.h"
#include "cluster/transfer.h"
#include "core/device.h"
#include "kernels/backend.h"
#include "media/host_context.h"
#include "models/model.h"
#include "sandbox/media_sandbox.h"
#include "server/http.h"

namespace mmrt::cluster {

struct EncodeWorkerConfig {
  std::string model_dir;
  std::string model_id;  // announced in etcd (workers of another model do not use it)
  Device device;
  kernels::BackendOptions backend;
  media::HostOptions host;
  models::LoadOptions model;
  sandbox::MediaSandboxConfig sandbox;  // model_dir and isa filled in here
  server::HttpOptions http;
  TransferAgentOptions transfer;  // its host: http.host
  int64_t max_queue = 64;
  uint64_t cache_bytes = uint64_t{256} << 20;  // encoded items kept for later askers (0: none)
  RegistrationOptions registration;            // etcd "": not registered (reached by URL only)
  std::string advertise_url;                   // "": http://host:port of the listener
  // Tests: "exit-before-transfer" kills the process (SIGKILL) when a reader asks for an item's
  // output, after the item was encoded and described: an encode worker dying mid-handoff.
  std::string fault;
  std::function<void(int port)> on_listen;
};

// Runs until SIGINT / SIGTERM; returns the exit code (1 when the model failed to load).
int run_encode_worker(EncodeWorkerConfig cfg);

}  // namespace mmrt::cluster
