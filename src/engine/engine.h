// The engine: the library API the CLI and the HTTP server use. submit() takes a chat (text and
// media) or raw token ids and returns a handle that streams text and ends with exactly one
// outcome; cancel() works at any moment. Inside, data flows one way:
//   submit -> media stage: prepare (template, tokens, media headers)
//          -> step loop: admission (on the expected work, before any decoding)
//          -> media stage: preprocess (admitted requests with media only)
//          -> step loop: scheduler -> executor (model runner) -> update -> handles.
// The engine knows models only through the registry's seam (models/model.h).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/admission.h"
#include "engine/batch_controller.h"
#include "engine/cost_model.h"
#include "engine/encoder_calibration.h"
#include "engine/executor.h"
#include "engine/handle.h"
#include "engine/media_stage.h"
#include "engine/scheduler.h"
#include "engine/sla.h"
#include "engine/step_graphs.h"
#include "kernels/backend.h"
#include "kernels/registry.h"
#include "media/host_context.h"
#include "models/model.h"

namespace mmrt::io {
class Tokenizer;
}

namespace mmrt::engine {

struct EngineConfig {
  std::string model_dir;
  Device device;                    // where the model computes (kernels/registry.h)
  kernels::BackendOptions backend;  // the backend's settings: CPU threads, kernel variant cap
  // Makes the backend for `device` (the registry's, kernels::create_backend; a test may hand the
  // engine its own, e.g. the emulated device).
  std::function<std::unique_ptr<kernels::Backend>(Device, const kernels::BackendOptions&)>
      make_backend =
          [](Device d, const kernels::BackendOptions& o) { return kernels::create_backend(d, o); };
  media::HostOptions host;    // media buffers and the media kernels' cap
  models::LoadOptions model;  // weight format and placement
  KvOptions kv;               // KV cache element type, block size, size
  SchedulerConfig scheduler;  // position_rows / encoder_row_bytes come from the model
  std::string policy = "fcfs";
  uint64_t encoder_cache_bytes = 256ull << 20;
  bool prefix_caching = true;
  int media_threads = 1;
  // An admitted request's media item whose encoder output is cached, or whose whole span is in
  // the prefix cache, is not decoded (its header's estimate must be exact). Off: every item is.
  bool skip_cached_media = true;
  // Media decoding in confined worker processes (off here; the CLI and the server turn it on).
  // model_dir and the kernel variant cap are filled in from this config.
  sandbox::MediaSandboxConfig media_sandbox;
  // Media items encoded elsewhere (an encode worker, engine/remote_encoder.h) when it can; null:
  // always here.
  std::shared_ptr<RemoteEncoder> remote_encoder;
  // Told what the encoder cache holds as it changes (engine/encoder_cache.h), e.g. to publish it
  // to a cluster's router. Called on the step loop: it must not block.
  MediaCacheListener on_media_cache;
  // Told what the prefix cache holds as it changes (engine/kv_manager.h: block keys stored and
  // evicted), e.g. to publish it to a cluster's router. Called on the step loop: never blocks.
  KvCacheListener on_kv_cache;
  // A text request whose messages hold at most this many bytes is prepared (template, tokens)
  // on the submitting thread; longer ones and any with media on the media stage's own thread, so
  // an event-loop caller never tokenises a long prompt.
  size_t prepare_inline_bytes = 4096;
  SlaConfig sla = SlaConfig::defaults();
  bool admission_control = true;  // refuse / downgrade requests predicted to miss their class
  // Admit lighter classes only with room for the recent inflow of heavier ones (slo:reserve):
  // more platinum served above capacity, fewer requests in all (docs/sla.md).
  bool admission_reserve = false;
  // Learn a per-class safety on the queue's share of each prediction from the admitted requests
  // that came late (NAME:safe): fewer refused late, somewhat fewer served above capacity
  // (docs/sla.md, "The safety on predicted work").
  bool admission_safety = false;
  // Prompt tokens (text and media together) a tenant's admitted, unfinished requests may hold:
  // a request over it is refused at admission (429 over HTTP), so one tenant cannot fill the
  // engine for the others. 0: no cap; -1: half the KV cache's tokens. A request may carry its
  // tenant's own (GenerateRequest::tenant_max_prompt_tokens).
  int64_t tenant_max_prompt_tokens = 0;
  bool batch_controller = true;  // adapt the step budget to the tightest running TPOT target
  // With the batch controller: an item whose encoder runs in parts (a Qwen vision tower: one per
  // block) runs as many as the step's time goal leaves room for, the rest in the next steps, so
  // the decoding requests keep their TPOT schedules while it is encoded. Off: whole items.
  bool encoder_parts = true;
  // Time one encode of a synthetic item at load and price media by it from the first request
  // (engine/encoder_calibration.h); off: the cost model's prior until image steps have run.
  // Costs one or two encodes at load (CLIP ViT-L on 2 cores: about 2 s).
  bool calibrate_encoder = true;
  // The load-time measurement can come out high (a neighbour busy on the cores while it ran:
  // 5.2 and 9.1 ms per patch against 1.55 quiet, seen), and then every image whose own work it
  // prices over its class's budget is refused as unattainable, so no image step ever runs to
  // correct it. So when a request with media is refused that way, the step loop measures again
  // once it is idle (at most once per this interval), and a lower price replaces the higher one
  // (load only ever slows it). <= 0: never.
  int64_t encoder_remeasure_ns = 30'000'000'000;
  // > 0: the encoder's price per unit (ns per image patch / audio frame) instead of the load-time
  // measurement (which calibrate_encoder then skips); e.g. a known figure for a fast start.
  double encoder_ns_per_unit = 0;
  // Decode steps replayed as device graphs where the backend records them (a GPU): the decode
  // sizes that get one, and the longest context that replays (warm_tokens: the step budget).
  StepGraphOptions step_graphs;
  BatchControllerConfig batch;  // max_budget is taken from scheduler.token_budget
};

struct GenerateRequest {
  std::vector<models::ChatMessage> messages;  // media parts take `media` in order
  std::vector<PendingMedia> media;            // encoded files (images: JPEG/PNG/WebP)
  std::vector<int32_t> prompt_ids;            // instead of messages: token ids as is
  std::string prompt_text;                    // instead of messages: raw text, no chat template
  SamplingParams sampling;
  std::string tenant = "default";
  int32_t priority = 0;
  // The SLA class; "" = best effort (no deadline). A server maps requests without a class to
  // SlaConfig::default_class itself.
  std::string sla_class;
  // Explicit deadline relative to arrival: tightens the class's (never loosens it); for a class
  // without a deadline, at most the loosest class's; without a class, as given.
  int64_t ttft_deadline_ns = 0;
  // When the request's first byte reached the server and when its body was complete (now_ns()
  // clock; 0: at submit). The request's clock starts at arrival: its deadline, TTFT, E2E and
  // admission's prediction count the time the server spent before submit (reading, parsing,
  // fetching media). A stamp in the future or before the read is taken as submit time.
  int64_t arrival_ns = 0, read_ns = 0;
  int64_t tpot_target_ns = 0;  // explicit TPOT target (tightens the class's, never loosens it)
  // Its tenant's cap on prompt tokens in flight (0: the engine's, EngineConfig).
  int64_t tenant_max_prompt_tokens = 0;
  // The output a worker that failed mid-stream had already delivered (its token ids, from the
  // stream's events): this request continues from them (Request::resume; sampling as if it had
  // generated them, so a greedy or seeded stream goes on as it would have). Events carry only
  // what follows.
  std::vector<int32_t> resume_ids;

  // Appends an image: its bytes to `media` (the messages must hold the matching image part).
  void add_image(std::vector<uint8_t> bytes) {
    media.push_back({models::Modality::kImage, std::move(bytes), {}});
  }
};

// With admission's counts (refused, downgraded, refused_late, ..., admission.h).
struct EngineStats : AdmissionStats {
  int64_t steps = 0, submitted = 0, finished = 0, preemptions = 0;
  // Time the step loop spent, summed: in the steps themselves (the model's forward passes and
  // encoders), and busy in all (each iteration that ran a step: admission, scheduling, the step,
  // the tokens out). Over a run's wall time: how much of it the engine worked.
  int64_t step_ns = 0, loop_busy_ns = 0;
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
  int64_t encoder_hits = 0, encoder_misses = 0, encoder_runs = 0;
  // Steps that ran some of an item's encoder parts and left the rest to later steps (the step's
  // time goal had no room for the whole item: EngineConfig::encoder_parts).
  int64_t encoder_split_steps = 0;
  // Media items admitted without decoding (served from a cache: skip_cached_media), and of
  // those, the ones decoded after all because the cache lost them before they were encoded.
  int64_t media_skipped = 0, media_redecoded = 0;
  // Copies through the compute backend (host<->device, on the device): encoder outputs to the
  // host store, media rows back, logits to the sampler, KV copy-on-write. On the CPU backend
  // only the KV block copies count (host memory is its memory).
  kernels::TransferStats transfers;
  int32_t kv_blocks_used = 0, kv_blocks_total = 0;
  int32_t kv_block_size = 0;  // tokens per KV block (the prefix cache's unit)
  size_t waiting = 0, running = 0;
  size_t in_media = 0;  // of waiting: admitted, their media being decoded
  int32_t token_budget = 0;
  PredictionError ttft_prediction;
  sandbox::SandboxStats media_sandbox;
  RemoteEncodeStats remote_encode;
  std::array<double, 5> cost_coefficients_ns{};
  EncoderCalibration encoder_calibration;  // the measurement that set the encoder's price
  int64_t encoder_remeasured = 0;  // times an idle re-measurement lowered it (encoder_remeasure_ns)
  std::string step_graphs;         // what capturing them at load did (engine/step_graphs.h)
  StepGraphs::Stats step_graph_steps;  // decode steps replayed and not
};

class Engine {
 public:
  // Loads the model through the registry and starts the threads. Throws the loader's errors.
  static std::unique_ptr<Engine> create(const EngineConfig& cfg);
  ~Engine();  // cancels what is outstanding and stops the threads

  // Never throws for a bad request: it comes back as an outcome (refused / failed + reason).
  RequestHandle submit(GenerateRequest req);
  void cancel(RequestId id);
  // Admission before any work of the request's own: "" when `g` may be submitted, else why
  // its class would refuse it even if its prompt and media cost nothing (the queue ahead is
  // already too long). A server calls it before fetching media URLs.
  std::string precheck(const GenerateRequest& g);
  // Admission's quote for a request of each class arriving now (engine/admission.h).
  Quote quote() const;
  // A consistent snapshot of the books (taken by the step loop after each step).
  EngineStats stats() const;
  const models::ModelSpec& model_spec() const;
  const io::Tokenizer& tokenizer() const;
  const kernels::Backend& backend() const;
  // Blocks until no request is in flight.
  void wait_idle();

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::engine
