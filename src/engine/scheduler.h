// The scheduler: each step it turns the running and waiting requests into a StepPlan (plain
// data: which tokens of which requests to compute, which encoder jobs to run, who was
// preempted), within a token budget, decode tokens first so running streams never stall, then
// prefill chunks (image tokens count like any other; an image's prefill may span several chunks).
// The executor runs the plan and returns a StepOutput; update() applies it. Tests drive it with
// a fake executor: no model is needed to test scheduling.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/encoder_cache.h"
#include "engine/kv_manager.h"
#include "engine/policy.h"
#include "engine/request.h"

namespace mmrt::engine {

struct ScheduledChunk {
  Request* req = nullptr;
  int64_t start = 0;   // first token index computed this step (== req->num_computed before)
  int64_t n = 0;       // tokens computed this step
  bool sample = false; // the chunk reaches the request's last token: sample the next one
  bool prefill() const { return start < static_cast<int64_t>(req->prompt.size()); }
};

struct EncoderJob {
  Request* req = nullptr;
  size_t media = 0;  // index into req->media
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<EncoderJob> encoder_jobs;
  std::vector<Request*> preempted;
  int64_t num_tokens = 0, num_decode_tokens = 0, num_prefill_tokens = 0;
  int64_t encoder_patches = 0;
  bool empty() const { return chunks.empty(); }
};

struct StepOutput {
  std::vector<int32_t> sampled;  // one per chunk with sample = true, in plan order
  int64_t step_ns = 0;
};

struct SchedulerConfig {
  int32_t token_budget = 512;           // tokens per step (decode + prefill)
  int64_t encoder_patch_budget = 16384; // vision patches encoded per step (one image always fits)
  int32_t max_running = 64;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, KvBlockManager& kv, EncoderCache& enc, std::unique_ptr<Policy> policy);

  void add(Request* req, int64_t now_ns);
  StepPlan schedule(int64_t now_ns);
  // Applies the step: advances num_computed, commits KV blocks, appends sampled tokens and
  // finishes requests that produced a stop token or reached max_tokens. Returns the requests
  // that got a token or finished, in plan order.
  std::vector<Request*> update(const StepPlan& plan, const StepOutput& out, int64_t now_ns);
  // Ends a request now (cancel, stop string, failure): frees its KV blocks, drops it.
  void finish(Request* req, Outcome outcome, int64_t now_ns, const std::string& reason = {});

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  bool idle() const { return waiting_.empty() && running_.empty(); }
  const std::vector<Request*>& running() const { return running_; }
  const std::vector<Request*>& waiting() const { return waiting_; }
  void set_token_budget(int32_t b) { cfg_.token_budget = b; }
  int32_t token_budget() const { return cfg_.token_budget; }
  const SchedulerConfig& config() const { return cfg_; }
  Policy& policy() { return *policy_; }
  int64_t total_preemptions() const { return preemptions_; }

 private:
  // Cuts n so the chunk [start, start + n) only enters images whose encoder output is cached or
  // whose encoder job fits this step's budget (scheduling those jobs).
  int64_t limit_for_media(Request* r, int64_t n, StepPlan& plan, int64_t& enc_budget);
  void preempt(Request* victim, StepPlan& plan, int64_t now_ns);
  void remove_running(Request* r);

  SchedulerConfig cfg_;
  KvBlockManager& kv_;
  EncoderCache& enc_;
  std::unique_ptr<Policy> policy_;
  std::vector<Request*> waiting_, running_;
  int64_t preemptions_ = 0;
};

}  // namespace mmrt::engine
