// `mmrt serve`: the OpenAI-compatible HTTP server around one engine. It listens before the
// model loads (/health answers 503 until it has), answers /v1/chat/completions and
// /v1/completions (streamed as server-sent events or whole), /v1/models, /health, /metrics and
// /v1/requests/{id}/trace, and shuts down gracefully on SIGINT / SIGTERM: it stops accepting,
// lets requests in flight finish within the drain timeout, cancels the rest and returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "engine/engine.h"
#include "server/api.h"
#include "server/fetcher.h"
#include "server/http.h"
#include "server/intake.h"
#include "server/realtime_session.h"

namespace mmrt::server {

struct ServerConfig {
  engine::EngineConfig engine;
  HttpOptions http;
  ApiOptions api;      // model_id and sla are filled in from the engine config when empty
  FetchOptions fetch;  // http(s) media URLs (max_bytes: api.max_media_bytes)
  std::chrono::milliseconds drain_timeout{10000};
  std::chrono::milliseconds ping_interval{5000};  // SSE keep-alive comments while silent
  int64_t max_in_flight = 4096;                   // completion requests at once (503 beyond)
  // Media bytes one tenant's requests in flight may hold (uploads decoded, and each URL at the
  // per-item cap until it has arrived); over it 429 (0: no cap).
  int64_t tenant_max_media_bytes = 0;
  size_t inline_parse_bytes = 64 << 10;  // larger bodies are parsed off the I/O thread
  IntakeOptions intake;       // ... in two lanes (large bodies apart), their queued bytes bounded
  std::string api_keys_file;  // "": open server (one tenant)
  std::string trace_dir;      // "": no files
  size_t trace_keep = 256;    // traces kept for /v1/requests/{id}/trace
  bool quiet = false;         // no per-request log lines
  RealtimeOptions realtime;   // GET /v1/realtime sessions (model_id and tenant set per session)
  // Called once the server listens (with its port) and once the model is loaded (ready).
  std::function<void(int port, bool ready)> on_state;
  // Called with the engine once it is loaded and warmed up, before on_state(port, true).
  std::function<void(const engine::Engine&)> on_loaded;
  // "" while the server may take requests; otherwise why not (e.g. it lost its cluster lease):
  // /health and new completion requests answer 503 with it. Called on an I/O thread.
  std::function<std::string()> out_of_service;
  // Every 250 ms once the model is loaded: the engine's stats and the completion requests in
  // flight (e.g. for load gauges). Called on an I/O thread: must not block.
  std::function<void(const engine::EngineStats&, int64_t in_flight)> on_stats;
  // More Prometheus text for /metrics (e.g. the remote encoder's). Called on an I/O thread.
  std::function<std::string()> extra_metrics;
};

// The model's name in the API when none is configured: the checkpoint directory's name.
std::string default_model_id(const std::string& model_dir);

// Runs the server until a signal ends it; returns the process exit code (0 after a graceful
// shutdown, 1 when the model failed to load). Throws when it cannot listen.
int run_server(ServerConfig cfg);

}  // namespace mmrt::server
