// The engine: the library API the CLI and the HTTP server use. submit() takes a chat (text and
// images) or raw token ids, returns a handle that streams text and ends with exactly one
// outcome; cancel() works at any moment. Inside: media decode/preprocessing on worker threads
// (off the step loop), then one step loop thread running scheduler -> executor -> update.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/batch_controller.h"
#include "engine/cost_model.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sla.h"
#include "io/chat_template.h"
#include "kernels/backend.h"
#include "models/qwen2_vl/language_model.h"

namespace mmrt::io {
class Tokenizer;
}

namespace mmrt::engine {

// Decoded + preprocessed image, as the vision tower consumes it.
struct PreparedImage {
  Tensor pixel_values;  // [n_patches, patch_dim] f32
  models::GridThw grid{};
};
// Turns encoded image bytes into model inputs; runs on a media worker thread.
using ImagePreprocessor = std::function<PreparedImage(std::span<const uint8_t> bytes)>;

struct EngineConfig {
  std::string model_dir;
  kernels::BackendOptions backend;  // the engine's compute: threads, kernel variant cap, buffers
  models::LanguageModelOptions model;
  SchedulerConfig scheduler;
  std::string policy = "fcfs";
  uint64_t encoder_cache_bytes = 256ull << 20;
  bool prefix_caching = true;
  int media_threads = 1;
  // How images become pixel_values; unset: the media module's Qwen2-VL preprocessing with the
  // checkpoint's preprocessor_config.json (fast mode).
  ImagePreprocessor preprocess;
  // A string identifying the preprocessing settings (part of every media cache key).
  std::string processor_tag = "qwen2vl-fast";
  SlaConfig sla = SlaConfig::defaults();
  bool admission_control = true;  // refuse / downgrade requests predicted to miss their class
  bool batch_controller = true;   // adapt the step budget to the tightest running TPOT target
  BatchControllerConfig batch;    // max_budget is taken from scheduler.token_budget
};

struct GenerateRequest {
  std::vector<io::ChatMessage> messages;     // image parts take `images` in order
  std::vector<std::vector<uint8_t>> images;  // encoded bytes (JPEG/PNG/WebP)
  std::vector<int32_t> prompt_ids;           // instead of messages: token ids as is
  SamplingParams sampling;
  std::string tenant = "default";
  int32_t priority = 0;
  std::string sla_class;         // "" = the SLA config's default class
  int64_t ttft_deadline_ns = 0;  // explicit deadline relative to submission (overrides the class)
  int64_t tpot_target_ns = 0;    // explicit TPOT target (overrides the class)
};

struct StreamEvent {
  enum class Kind { kText, kDone } kind = Kind::kText;
  std::string text;                  // kText: newly complete text
  Outcome outcome = Outcome::kNone;  // kDone
  std::string reason;
};

struct RequestResult {
  RequestId id = 0;
  std::string text;
  std::vector<int32_t> tokens;
  Outcome outcome = Outcome::kNone;
  std::string reason;
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0;
  int32_t preemptions = 0;
  std::string sla_class;                        // the class it was served in (after any downgrade)
  int64_t predicted_ttft_ns = 0;                // admission's prediction (0: none)
  int64_t deadline_ns = 0, tpot_target_ns = 0;  // absolute TTFT deadline, TPOT target
  Timeline timeline;
};

class Engine;

class RequestHandle {
 public:
  RequestId id() const;
  // Next event; nullopt on timeout (timeout_ms < 0 waits forever). After kDone: always kDone.
  std::optional<StreamEvent> next(int64_t timeout_ms = -1);
  // Waits for the end and returns everything (text, tokens, outcome, timeline).
  RequestResult wait();
  void cancel();

  struct State;
  explicit RequestHandle(std::shared_ptr<State> s) : s_(std::move(s)) {}

 private:
  std::shared_ptr<State> s_;
};

struct EngineStats {
  int64_t steps = 0, submitted = 0, finished = 0, preemptions = 0;
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
  int64_t encoder_hits = 0, encoder_misses = 0, encoder_runs = 0;
  int32_t kv_blocks_used = 0, kv_blocks_total = 0;
  size_t waiting = 0, running = 0;
  int64_t refused = 0, downgraded = 0;
  // Of `refused`: admitted requests refused later, before their first token (waiting or in
  // prefill), when it could no longer come in time (the admission prediction was wrong); of
  // `downgraded`, those moved to a lower class that way.
  int64_t refused_late = 0, downgraded_late = 0;
  int32_t token_budget = 0;
  PredictionError ttft_prediction;
  std::array<double, 5> cost_coefficients_ns{};
};

class Engine {
 public:
  // Loads the model (language model + vision tower) and starts the step loop.
  static std::unique_ptr<Engine> create(const EngineConfig& cfg);
  ~Engine();  // cancels what is outstanding and stops the threads

  // Never throws for a bad request: it comes back as an outcome (refused / failed + reason).
  RequestHandle submit(GenerateRequest req);
  void cancel(RequestId id);
  EngineStats stats() const;
  const io::Qwen2VLConfig& model_config() const;
  const io::Tokenizer& tokenizer() const;
  // Blocks until no request is in flight.
  void wait_idle();

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::engine
