// `mmrt serve`: the OpenAI-compatible HTTP server.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include "cli.h"
#include "cluster/cache_events.h"
#include "cluster/encode_worker.h"
#include "cluster/etcd.h"
#include "cluster/load_gauges.h"
#include "cluster/registration.h"
#include "cluster/remote_encoder.h"
#include "core/error.h"
#include "model_options.h"
#include "server/server.h"

namespace mmrt::cli {
namespace {

// A duration option in seconds (--read-timeout 2.5) as milliseconds.
std::chrono::milliseconds seconds_option(Args& args, const std::string& key, double def, double lo,
                                         double hi) {
  return std::chrono::milliseconds(static_cast<int64_t>(args.get_double(key, def, lo, hi) * 1000));
}

// Compute threads run below the I/O threads by default: with the model on every core, an
// I/O thread at equal priority waited for its slice (docs/benchmarks.md, the promise sweep).
constexpr int kComputeNice = 5;

int run_serve(Args& args) {
  server::ServerConfig cfg;
  cfg.engine.model_dir = args.require("model");
  cfg.http.host = args.get_or("host", "127.0.0.1");
  cfg.http.port = static_cast<int>(args.get_int("port", 8000, 0, 65535));
  cfg.http.threads = static_cast<int>(args.get_int("http-threads", 2, 1, 64));
  cfg.http.body_limit = static_cast<size_t>(args.get_int("max-body-mb", 64, 1, 4096)) << 20;
  cfg.http.read_timeout = seconds_option(args, "read-timeout", 30, 0.1, 3600);
  cfg.http.idle_timeout = seconds_option(args, "idle-timeout", 60, 0.1, 86400);
  cfg.http.max_connections = static_cast<int>(args.get_int("max-connections", 4096, 1, 1 << 20));
  cfg.max_in_flight = args.get_int("max-requests", 4096, 1, 1 << 20);
  cfg.intake.max_queued_bytes = static_cast<size_t>(args.get_int("max-intake-mb", 256, 1, 65536))
                                << 20;
  cfg.drain_timeout = seconds_option(args, "drain-timeout", 10, 0, 3600);
  cfg.ping_interval = seconds_option(args, "sse-ping", 5, 0.1, 3600);
  cfg.api.model_id = args.get_or("served-model-name", "");
  cfg.api.default_max_tokens =
      static_cast<int32_t>(args.get_int("default-max-tokens", 256, 1, 1 << 24));
  cfg.api.max_media_items = static_cast<int32_t>(args.get_int("max-media-items", 16, 0, 1024));
  cfg.api.max_media_bytes = static_cast<uint64_t>(args.get_int("max-media-mb", 32, 1, 4096)) << 20;
  cfg.api.allowed_media_dir = args.get_or("allowed-media-dir", "");
  cfg.fetch.threads = static_cast<int>(args.get_int("media-fetch-threads", 4, 1, 256));
  cfg.fetch.timeout_s = args.get_double("media-fetch-timeout", 5, 0.1, 600);
  cfg.fetch.max_redirects = static_cast<int>(args.get_int("media-fetch-redirects", 3, 0, 20));
  if (auto hosts = args.get("allowed-media-hosts"))
    cfg.fetch.allowed_hosts = split_list(*hosts, "allowed-media-hosts");
  if (auto blocks = args.get("fetch-allow")) cfg.fetch.allow = split_list(*blocks, "fetch-allow");
  cfg.api_keys_file = args.get_or("api-keys", "");
  // With tenants, none may hold more than half the KV cache's tokens in flight by default.
  cfg.engine.tenant_max_prompt_tokens =
      args.get_int("tenant-max-tokens", cfg.api_keys_file.empty() ? 0 : -1, -1, int64_t{1} << 40);
  cfg.tenant_max_media_bytes =
      args.get_int("tenant-max-media-mb", cfg.api_keys_file.empty() ? 0 : 1024, 0, 1 << 20) << 20;
  cfg.trace_dir = args.get_or("trace-dir", "");
  cfg.trace_keep = static_cast<size_t>(args.get_int("trace-keep", 256, 0, 1 << 20));
  cfg.realtime.max_buffer_seconds = args.get_double("realtime-max-audio", 300, 1, 3600);
  cfg.realtime.max_total_seconds = args.get_double("realtime-max-total-audio", 3600, 1, 1e6);
  cfg.realtime.idle_timeout_ms =
      static_cast<int64_t>(args.get_double("realtime-idle-timeout", 600, 1, 86400) * 1000);
  cfg.realtime.segment_silence_ms =
      static_cast<int32_t>(args.get_int("realtime-segment-silence-ms", 400, 20, 10000));
  const std::string sla_file = args.get_or("sla-config", "");
  apply_policy_option(args.get_or("policy", "slo"), cfg.engine);
  cfg.engine.encoder_parts =
      args.get_choice<bool>("encoder-parts", "on", {{"on", true}, {"off", false}});
  cfg.engine.scheduler.token_budget = step_tokens_option(args);
  cfg.engine.model = load_options(args);
  cfg.engine.kv = kv_options(args);
  const ComputeOptions compute = compute_options(args);
  set_compute(cfg.engine, compute);
  cfg.engine.backend.nice = static_cast<int>(args.get_int("compute-nice", kComputeNice, 0, 19));
  cfg.engine.media_sandbox = media_sandbox_options(args, cfg.engine.model_dir);
  const std::string remote = args.get_or("remote-encoders", "");
  // With encode workers a media lane mostly waits on the network: more lanes by default.
  cfg.engine.media_threads =
      static_cast<int>(args.get_int("media-threads", remote.empty() ? 1 : 4, 1, 64));
  cluster::RegistrationOptions reg;
  reg.etcd = args.get_or("cluster-etcd", "");
  reg.prefix = args.get_or("cluster-prefix", reg.prefix);
  reg.ttl_s = args.get_int("cluster-ttl", reg.ttl_s, 1, 3600);
  std::string advertise = args.get_or("advertise-url", "");
  const std::string nats = args.get_or("cluster-nats", "");
  const std::string role = args.get_or("role", "both");
  const auto remote_timeout = seconds_option(args, "remote-encode-timeout", 30, 0.1, 3600);
  const int64_t encode_queue = args.get_int("encode-queue", 64, 1, 1 << 20);
  const int64_t encode_cache_mb = args.get_int("encode-cache-mb", 256, 0, 1 << 20);
  const int transfer_port = static_cast<int>(args.get_int("transfer-port", 0, 0, 65535));
  const std::string fault = args.get_or("test-fault", "");
  args.finish();
  if (role != "both" && role != "encode")
    throw InvalidArgument("--role " + role + ": both (the default) or encode");
  if (cfg.api.model_id.empty()) cfg.api.model_id = server::default_model_id(cfg.engine.model_dir);
  if (role == "encode") {
    if (!remote.empty()) throw InvalidArgument("--remote-encoders is for workers of role both");
    cluster::EncodeWorkerConfig ec;
    ec.model_dir = cfg.engine.model_dir;
    ec.model_id = cfg.api.model_id;
    ec.device = compute.device;
    ec.backend = compute.backend;
    ec.host = compute.host;
    ec.model = cfg.engine.model;
    ec.sandbox = cfg.engine.media_sandbox;
    ec.http = cfg.http;
    ec.transfer.port = transfer_port;
    ec.max_queue = encode_queue;
    ec.cache_bytes = static_cast<uint64_t>(encode_cache_mb) << 20;
    ec.registration = reg;
    ec.advertise_url = advertise;
    ec.fault = fault;
    return cluster::run_encode_worker(std::move(ec));
  }
  if (!fault.empty()) throw InvalidArgument("--test-fault is for --role encode");
  std::shared_ptr<cluster::RemoteEncoderPool> encoders;
  if (!remote.empty()) {
    cluster::RemoteEncoderOptions ro;
    ro.model = cfg.api.model_id;
    ro.timeout = remote_timeout;
    if (remote == "auto") {
      if (reg.etcd.empty())
        throw InvalidArgument("--remote-encoders auto finds them in etcd: give --cluster-etcd");
      ro.etcd = reg.etcd;
      ro.prefix = reg.prefix;
    } else {
      ro.urls = split_list(remote, "remote-encoders");
    }
    encoders = std::make_shared<cluster::RemoteEncoderPool>(ro);
    cfg.engine.remote_encoder = encoders;
    cfg.extra_metrics = [encoders] { return encoders->metrics(); };
  }
  if (!sla_file.empty()) cfg.engine.sla = engine::SlaConfig::load(sla_file);
  if (!cfg.api.allowed_media_dir.empty() &&
      !std::filesystem::is_directory(cfg.api.allowed_media_dir))
    throw InvalidArgument("--allowed-media-dir " + cfg.api.allowed_media_dir +
                          " is not a directory");
  // Bodies carry base64 media (4/3 of the bytes): the body cap must let the media cap through.
  if (reg.etcd.empty()) return server::run_server(std::move(cfg));
  // A cluster worker: registered once the model is loaded, out of service while its lease
  // has lapsed.
  cluster::WorkerInfo self;
  self.model = cfg.api.model_id;
  self.capacity = cfg.max_in_flight;
  for (const auto& c : cfg.engine.sla.classes) self.classes.push_back(c.name);
  cluster::check_etcd_endpoint(reg.etcd);  // before the model loads
  if (!nats.empty() && reg.etcd.empty())
    throw InvalidArgument(
        "--cluster-nats needs --cluster-etcd (the router knows workers from etcd)");
  std::mutex mu;
  std::unique_ptr<cluster::Registration> registration;
  std::unique_ptr<cluster::GaugePublisher> gauges;
  // The encoder cache's changes, from the engine's start, published once the worker has an id.
  std::unique_ptr<cluster::CachePublisher> media;
  // ... and the prefix cache's (its block keys), which a router with the model predicts.
  std::unique_ptr<cluster::CachePublisher> kv;
  if (!nats.empty()) {
    media = std::make_unique<cluster::CachePublisher>(nats, cluster::kMediaTopic);
    cfg.engine.on_media_cache = [p = media.get()](bool stored, const Hash128& file) {
      p->on_change(stored, file);
    };
    kv = std::make_unique<cluster::CachePublisher>(nats, cluster::kKvTopic);
    cfg.engine.on_kv_cache = [p = kv.get()](bool stored, const Hash128& block) {
      p->on_change(stored, block);
    };
  }
  const engine::Engine* loaded = nullptr;  // set once loaded, for admission's quotes
  cfg.on_loaded = [&, prefix = cfg.engine.prefix_caching](const engine::Engine& e) {
    if (kv && prefix) self.kv_block = e.stats().kv_block_size;
    self.encoder = e.model_spec().encoder_precision;
    std::lock_guard<std::mutex> lk(mu);
    loaded = &e;
  };
  cfg.on_state = [&, host = cfg.http.host](int port, bool ready) {
    if (!ready) {
      if (advertise.empty()) {
        if (host == "0.0.0.0" || host == "::")
          throw InvalidArgument("--advertise-url is needed with --host " + host);
        advertise = "http://" + host + ":" + std::to_string(port);
      }
      self.url = advertise;
      self.id = advertise.substr(7) + "-" + std::to_string(getpid());
      return;
    }
    auto r = std::make_unique<cluster::Registration>(reg, self, [](const std::string& line) {
      std::fprintf(stderr, "[mmrt] %s\n", line.c_str());
    });
    std::unique_ptr<cluster::GaugePublisher> g;
    if (!nats.empty()) g = std::make_unique<cluster::GaugePublisher>(nats, self.id);
    if (media) media->start(self.id);
    if (kv) kv->start(self.id);
    std::lock_guard<std::mutex> lk(mu);
    registration = std::move(r);
    gauges = std::move(g);
  };
  cfg.on_stats = [&, admission = cfg.engine.admission_control](const engine::EngineStats& s,
                                                               int64_t in_flight) {
    const engine::Engine* e = nullptr;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (!gauges) return;
      e = loaded;
    }
    cluster::LoadGauge g;
    g.waiting = static_cast<int64_t>(s.waiting);
    g.running = static_cast<int64_t>(s.running);
    g.in_flight = in_flight;
    g.kv_usage = s.kv_blocks_total ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total : 0;
    // What admission would predict for each class now (the router predicts with it), taken
    // without `mu`: every request's out_of_service check takes it, and the quote waits for the
    // step loop's books.
    if (e && admission) g.quote = e->quote();
    std::lock_guard<std::mutex> lk(mu);
    gauges->set(g);
  };
  cfg.out_of_service = [&]() -> std::string {
    std::lock_guard<std::mutex> lk(mu);
    if (!registration || registration->serving()) return "";
    return "this worker is out of the cluster: " + registration->reason();
  };
  const int rc = server::run_server(std::move(cfg));
  std::lock_guard<std::mutex> lk(mu);
  gauges.reset();
  registration.reset();  // leaves the cluster (its lease revoked)
  media.reset();
  kv.reset();
  return rc;
}

MMRT_COMMAND(
    "serve", "OpenAI-compatible HTTP server (chat and completions, streaming, metrics)",
    "usage: mmrt serve --model DIR [--host 127.0.0.1] [--port 8000] [options]\n\n"
    "Serves the checkpoint in DIR over HTTP with the OpenAI API's conventions:\n"
    "  POST /v1/chat/completions   chat (text; images as image_url, audio as input_audio or\n"
    "                              audio_url: data:, http(s):// or file:// URLs), streamed\n"
    "                              as server-sent events with \"stream\": true\n"
    "  POST /v1/completions        raw text prompt (no chat template)\n"
    "  GET  /v1/models             the served model\n"
    "  GET  /v1/sla                the SLA classes, admission's prediction for each now, and\n"
    "                              the longest text prompt each class takes here\n"
    "  GET  /health                200 once loaded (503 while loading or shutting down)\n"
    "  GET  /metrics               Prometheus text: queue, KV, caches, latency histograms\n"
    "                              per SLA class and per stage\n"
    "  GET  /v1/requests/ID/trace  one request's timeline (Chrome trace / Perfetto JSON)\n"
    "  GET  /v1/realtime           WebSocket, the OpenAI Realtime API's audio-in events (an\n"
    "                              audio model; prefilled segment by segment as it is spoken)\n"
    "Every request is served in an SLA class: `sla_class` (mmrt), else `service_tier`\n"
    "(priority -> platinum, default -> gold, flex -> silver), else the configured default;\n"
    "`ttft_deadline_ms` sets an explicit deadline. A request that cannot meet its class is\n"
    "refused at once with 429 and Retry-After. SIGINT / SIGTERM drain and exit 0.\n\n"
    "network:\n"
    "  --host ADDR             address to listen on (default 127.0.0.1)\n"
    "  --port N                port (default 8000; 0: any free port)\n"
    "  --http-threads N        event-loop threads (default 2)\n"
    "  --max-connections N     open connections at most (default 4096; 503 beyond)\n"
    "  --max-requests N        completion requests in flight at most (default 4096; 503)\n"
    "  --max-intake-mb N       request bodies waiting to be parsed, in MiB (default 256; 503\n"
    "                          with Retry-After beyond). Bodies of 1 MiB or more are parsed in\n"
    "                          a lane of their own: a huge body never delays an ordinary one\n"
    "  --read-timeout S        a request's headers and body must arrive within S s (30)\n"
    "  --idle-timeout S        keep-alive connections idle longer are closed (60)\n"
    "  --drain-timeout S       on SIGTERM, requests in flight get S s to finish (10)\n"
    "  --sse-ping S            keep-alive comment on silent streams every S s (5)\n"
    "requests:\n"
    "  --served-model-name ID  the model's name in the API (default: DIR's name)\n"
    "  --default-max-tokens N  when a request gives no max_tokens (default 256)\n"
    "  --max-body-mb N         request body limit in MiB (default 64; 413 beyond)\n"
    "  --max-media-items N     media parts per request (default 16)\n"
    "  --max-media-mb N        one decoded media item in MiB (default 32; 413 beyond)\n"
    "  --allowed-media-dir DIR file:// media URLs only under DIR (default: none allowed)\n"
    "  --allowed-media-hosts H[,H...]  http(s) media URLs only from these hosts (default any)\n"
    "  --fetch-allow CIDR[,CIDR...]  non-public addresses media URLs may reach (default none:\n"
    "                          loopback, private, link-local ... are refused, each connection\n"
    "                          checked after DNS, on every redirect)\n"
    "  --media-fetch-timeout S a media URL must arrive within S s, redirects included (5)\n"
    "  --media-fetch-redirects N   redirects followed at most, each checked (default 3)\n"
    "  --media-fetch-threads N concurrent media downloads (default 4)\n"
    "  --trace-dir DIR         write every request's trace to DIR/ID.json\n"
    "  --trace-keep N          traces kept for /v1/requests/ID/trace (default 256)\n"
    "realtime (/v1/realtime):\n"
    "  --realtime-max-audio S  audio a session holds, uncommitted + unanswered (default 300;\n"
    "                          beyond: an error event and the buffer cleared)\n"
    "  --realtime-max-total-audio S  audio all sessions hold together (default 3600, ~170 MB;\n"
    "                          an append beyond: an error event, the append dropped)\n"
    "  --realtime-idle-timeout S   no client event for S s: error event, then closed (600)\n"
    "  --realtime-segment-silence-ms MS  a pause this long closes an item, which is then\n"
    "                          prefilled (default 400; at most the session's silence_duration)\n"
    "tenants:\n"
    "  --api-keys FILE         API keys (JSON): key -> tenant, its SLA classes, default\n"
    "                          class and request rate; 401 without a valid key, 403 for a\n"
    "                          class it may not use (default: open, one tenant)\n"
    "  --tenant-max-tokens N   prompt tokens (text and media) one tenant's unfinished requests\n"
    "                          may hold; over it 429 (default with --api-keys: half the KV\n"
    "                          cache, -1; without: 0, none); a key's max_prompt_tokens_in_flight\n"
    "                          overrides it\n"
    "  --tenant-max-media-mb N media bytes one tenant's requests in flight may hold (uploads,\n"
    "                          and each URL at --max-media-mb until fetched); over it 429\n"
    "                          (default with --api-keys: 1024; without: 0, none)\n"
    "SLA:\n"
    "  --sla-config FILE       SLA classes (JSON, see docs/sla.md)\n"
    "  --policy fcfs|priority|slo[:plain]   scheduling policy (default slo); :plain turns off\n"
    "                          admission control and the batch controller (a baseline);\n"
    "                          slo:reserve admits lighter classes only with room for the\n"
    "                          recent inflow of heavier ones (more platinum, fewer in all);\n"
    "                          :safe learns a margin per class from admitted requests that\n"
    "                          came late (fewer refused late, a few % fewer served above\n"
    "                          capacity)\n"
    "  --encoder-parts on|off  with the batch controller, run an image's vision tower, a\n"
    "                          video's slices or an audio clip's tower a few blocks a step,\n"
    "                          as the running requests' TPOT schedules allow, instead of\n"
    "                          whole in one step (default on)\n"
    "cluster (docs/scale-out.md):\n"
    "  --cluster-etcd URL      register in the cluster whose etcd answers at URL\n"
    "                          (http://host:port) once the model is loaded; `mmrt router`\n"
    "                          sends requests here while the registration's lease lives\n"
    "  --cluster-prefix P      the key prefix workers register under (default /mmrt/workers/)\n"
    "  --cluster-ttl S         the lease's TTL in s, renewed every S/2 (default 3): a worker\n"
    "                          whose lease etcd dropped answers 503 until it is back in\n"
    "  --cluster-nats URL      publish this worker's load (queue, running, requests in\n"
    "                          flight, KV use) every 250 ms and its encoder cache's changes\n"
    "                          (which media files it holds) on NATS (nats://host:port), where\n"
    "                          the router reads them\n"
    "  --advertise-url URL     where the router reaches this worker (default\n"
    "                          http://HOST:PORT as listening)\n"
    "  --role both|encode      both (default): serve requests; encode: an encode worker that\n"
    "                          only decodes media and runs the encoders for the others\n"
    "                          (POST /v1/encode; registered with role encode; it loads the\n"
    "                          encoders only and allocates no KV cache)\n"
    "  --remote-encoders auto|URL[,URL...]  encode admitted requests' media on encode\n"
    "                          workers (auto: those of this model in --cluster-etcd), their\n"
    "                          output read over TCP into the encoder cache; encoded here when\n"
    "                          none answers in time or one fails (counted in /metrics)\n"
    "  --remote-encode-timeout S   one item's encode and transfer at most (default 30)\n"
    "  --encode-queue N        an encode worker's items waiting at most (default 64; 503)\n"
    "  --encode-cache-mb N     an encode worker keeps encoded items (per tenant) for later\n"
    "                          askers, in MiB (default 256; 0: none)\n"
    "  --transfer-port N       an encode worker's transfer port (default 0: any free one)\n"
    "runtime:\n" MMRT_MODEL_OPTIONS_HELP MMRT_SANDBOX_OPTIONS_HELP
    "  --media-threads N       media preprocessing lanes (default 1; 4 with --remote-encoders,\n"
    "                          whose lanes mostly wait on encode workers)\n"
    "  --step-tokens N         token budget per engine step (default 512)\n"
    "  --compute-nice N        scheduling niceness of the model's compute threads, 0-19\n"
    "                          (default 5): accepting, reading, parsing and writing requests\n"
    "                          win the cores from the model, so intake never starves under load\n",
    {"map-weights", "batch-invariant"}, run_serve);

}  // namespace
}  // namespace mmrt::cli
