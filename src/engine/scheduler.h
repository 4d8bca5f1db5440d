// The scheduler: each step it turns the running and waiting requests into a StepPlan within a
// token budget, decode tokens first so running streams never stall, then prefill chunks (media
// placeholder tokens count like any other; a media item's prefill may span several chunks).
//
// The plan is plain data (engine/step.h: request ids, the tokens and positions to compute, block
// tables, the encoder rows to read, the encoder jobs to run, the encoder entries to free, what to
// sample): no pointer into a Request. The executor runs it against the memory it owns (KV, encoder
// outputs) and returns a StepOutput; update() applies that to the books. The scheduler and its
// managers keep every book: KV blocks, prefix cache, encoder-cache residency, pins and hit
// counts. Tests drive it with a fake executor: no model is needed to test scheduling.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/batch_controller.h"
#include "engine/cost_model.h"
#include "engine/encoder_cache.h"
#include "engine/kv_manager.h"
#include "engine/policy.h"
#include "engine/request.h"
#include "engine/step.h"

namespace mmrt::engine {

struct SchedulerConfig {
  int32_t token_budget = 512;            // tokens per step (decode + prefill)
  int64_t encoder_patch_budget = 16384;  // encoder work per step (one item always fits)
  int32_t max_running = 64;
  int32_t position_rows = 1;       // rows of ScheduledChunk::positions
  uint64_t encoder_row_bytes = 0;  // bytes of one stored encoder row (embed_dim * 2)
  // The parts an item's encoder runs in (models::Runner::encode_parts; none: 1), asked when a
  // request is added (an output computed elsewhere is one part).
  std::function<int64_t(const models::PreparedMedia&)> encode_parts;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, KvBlockManager& kv, EncoderCache& enc,
            std::unique_ptr<Policy> policy);

  void add(Request* req, int64_t now_ns);
  StepPlan schedule(int64_t now_ns);
  // Applies the step: advances num_computed, commits KV blocks, appends sampled tokens, records
  // encoder timings, unpins what the plan read, and finishes requests that produced a stop
  // token, reached max_tokens or the context length. Returns the requests that got a token or
  // finished, in plan order.
  std::vector<Request*> update(const StepPlan& plan, const StepOutput& out, int64_t now_ns);
  // The step of `plan` failed: forgets the encoder entries it reserved and the encodes in parts
  // it advanced, unpins what it read, and returns the requests it had work for (a chunk, an
  // encoder job), which the engine fails.
  std::vector<Request*> abort(const StepPlan& plan);
  // Takes a request out of scheduling (its KV blocks freed, nothing computed) to come back
  // through add() later: one of plan.need_media.
  void withdraw(Request* req);
  // Ends a request now (cancel, stop string, failure): frees its KV blocks, drops it.
  void finish(Request* req, Outcome outcome, int64_t now_ns, const std::string& reason = {});

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  bool idle() const { return waiting_.empty() && running_.empty(); }
  bool contains(const Request* r) const;
  const std::vector<Request*>& running() const { return running_; }
  const std::vector<Request*>& waiting() const { return waiting_; }
  void set_token_budget(int32_t b) { cfg_.token_budget = b; }
  // How the next steps pace an item's encoder parts (EncoderPacing; all 0: whole items).
  void set_encoder_pacing(const EncoderPacing& p) { pacing_ = p; }
  int32_t token_budget() const { return cfg_.token_budget; }
  const SchedulerConfig& config() const { return cfg_; }
  Policy& policy() { return *policy_; }
  const Policy& policy() const { return *policy_; }
  int64_t total_preemptions() const { return preemptions_; }
  // Items whose encoder began (a run), and steps that ran part of an item's encoder and left the
  // rest to later steps.
  int64_t encoder_runs() const { return encoder_runs_; }
  int64_t encoder_split_steps() const { return encoder_split_steps_; }

 private:
  // Cuts n so the chunk [start, start + n) only enters media whose encoder output is cached or
  // whose encoder job fits this step's budget (scheduling those jobs). 0, with the request in
  // plan.need_media, when the chunk needs an encoder job for an item without features.
  int64_t limit_for_media(Request* r, int64_t n, StepPlan& plan, int64_t& enc_budget,
                          int64_t& budget);
  // Plans parts of item `i` of `r` from part `done` (of m.encode_parts) as this step's budgets
  // allow; false when none fits.
  bool plan_parts(Request* r, size_t i, int64_t done, StepPlan& plan, int64_t& enc_budget,
                  int64_t& budget);
  // Drops the encodes in parts that no waiting or running request needs any longer.
  void drop_orphan_encodes(StepPlan& plan);
  void preempt(Request* victim, StepPlan& plan, int64_t now_ns);
  void remove_running(Request* r);
  // Fills the plain data of the chunks (tokens, positions, tables, media rows, sampling), pins
  // the cache entries they read and counts encoder hits and misses.
  void describe_chunks(StepPlan& plan, const std::vector<Request*>& reqs);

  SchedulerConfig cfg_;
  KvBlockManager& kv_;
  EncoderCache& enc_;
  std::unique_ptr<Policy> policy_;
  std::vector<Request*> waiting_, running_;
  std::unordered_map<RequestId, Request*> by_id_;  // every request in waiting_ or running_
  std::vector<Hash128> pinned_;                    // pinned by the last plan, until update()
  // Items whose encoder runs in parts, from their first part's plan until their last's: parts
  // planned, whether the cache holds room (pinned meanwhile), and the encoder's input. Whichever
  // request needs the item next plans its next part with that input: a request sharing the
  // image was admitted without features of its own (the cache's reservation read as a hit), and
  // under slo it may come first.
  struct Encoding {
    int64_t done = 0, parts = 1;
    bool keep = false;
    models::PreparedMedia input;
  };
  std::unordered_map<Hash128, Encoding, Hash128Hasher> encoding_;
  std::vector<Hash128> dropped_;  // by abort(), for the next plan's encoder_drops
  EncoderPacing pacing_;
  int64_t now_ = 0;  // schedule()'s time
  int64_t preemptions_ = 0;
  int64_t encoder_runs_ = 0, encoder_split_steps_ = 0;
};

// The cost model's view of a plan: its prefill and decode tokens, the context they attend, its
// encoder jobs and their patches.
StepFeatures step_features(const StepPlan& plan);

// The time a step spent in its encoder jobs (they run one after another).
double encoder_ns(const StepOutput& out);

}  // namespace mmrt::engine
