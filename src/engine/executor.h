// Executes a StepPlan: frees the encoder entries the plan evicted, runs the encoder jobs (the
// model's Runner -> the encoder store), then one decoder forward over every scheduled chunk,
// then sampling on the backend (engine/step_sampler.h). The executor owns the memory, all of it
// the backend's: the paged KV cache, the encoder outputs (f16) and each chunk's gathered media
// rows; only sampled ids, top-k candidates and the rows drawn from their whole vocabulary come to
// the host (counted in Backend::transfers where the backend is a device). The plan says
// everything else (the scheduler keeps the books).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/encoder_cache.h"
#include "engine/scheduler.h"
#include "engine/step_graphs.h"
#include "engine/step_sampler.h"
#include "kernels/kv_cache.h"
#include "kernels/scratch.h"
#include "models/model.h"
#include "models/session.h"

namespace mmrt::engine {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual StepOutput execute(const StepPlan& plan) = 0;
};

// How the KV cache memory is laid out (models/session.h: the one sizing rule).
using KvOptions = models::KvOptions;

class ModelExecutor : public Executor {
 public:
  // Allocates the KV cache the runner's layout needs from `be`, the backend the runner computes
  // on (ResourceExhausted when it cannot).
  ModelExecutor(const kernels::Backend& be, models::Runner& runner, int64_t embed_dim,
                const KvOptions& kv);
  StepOutput execute(const StepPlan& plan) override;

  const kernels::KvCacheConfig& kv_config() const { return kv_->config(); }
  const EncoderStore& encoder_store() const { return store_; }
  // Captures decode step graphs (engine/step_graphs.h) where the backend records them; at load,
  // before the first step. Returns the line for the log.
  std::string capture_step_graphs(const StepGraphOptions& o);
  StepGraphs::Stats step_graph_stats() const {
    return graphs_ ? graphs_->stats() : StepGraphs::Stats{};
  }

 private:
  const kernels::Backend& be_;
  models::Runner& runner_;
  int64_t embed_dim_;
  std::unique_ptr<kernels::KvCache> kv_;
  EncoderStore store_;
  // Per-chunk buffers, reused across steps.
  std::vector<std::vector<int32_t>> rows_;
  std::vector<kernels::Scratch> embeds_;  // the chunk's media rows [n, embed_dim]
  std::vector<const SampleSpec*> specs_;  // the sampled chunks' specs, in plan order
  StepSampler sampler_;
  std::unique_ptr<StepGraphs> graphs_;  // null: every step eager
  // Items encoded in parts, between their first part's step and their last's.
  struct Partial {
    models::PreparedMedia input;  // what the job reads (shares the request's features)
    std::unique_ptr<models::EncodeJob> job;
  };
  std::unordered_map<Hash128, std::unique_ptr<Partial>, Hash128Hasher> partial_;
  // Runs the plan's parts of `job`; its output once the last has run (else empty).
  Tensor run_encoder(const EncoderJob& job);
};

}  // namespace mmrt::engine
