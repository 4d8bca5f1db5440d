#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mmrt::engine {

namespace {

// The part of a chunk the scheduler decides; the plan builder fills the rest.
ScheduledChunk chunk_header(const Request& r, int64_t n) {
  ScheduledChunk c;
  c.id = r.id;
  c.start = r.num_computed;
  c.n = n;
  c.sample = r.num_computed + n == r.num_tokens();
  return c;
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& cfg, KvBlockManager& kv, EncoderCache& enc,
                     std::unique_ptr<Policy> policy)
    : cfg_(cfg), kv_(kv), enc_(enc), policy_(std::move(policy)) {
  if (cfg_.token_budget < 1) throw InvalidArgument("scheduler token budget must be >= 1");
}

void Scheduler::add(Request* req, int64_t now_ns) {
  if (cfg_.encode_parts)
    for (MediaItem& m : req->media)
      m.encode_parts =
          m.prepared.encoded_elsewhere() ? 1 : std::max<int64_t>(1, cfg_.encode_parts(m.prepared));
  req->status = RequestStatus::kWaiting;
  req->timeline.add(Event::kQueued, now_ns);
  waiting_.push_back(req);
  by_id_[req->id] = req;
}

bool Scheduler::contains(const Request* r) const {
  auto it = by_id_.find(r->id);
  return it != by_id_.end() && it->second == r;
}

void Scheduler::remove_running(Request* r) {
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
}

void Scheduler::preempt(Request* v, StepPlan& plan, int64_t now_ns) {
  v->timeline.add(Event::kPreempted, now_ns, v->num_computed);
  kv_.free(*v);
  v->num_computed = 0;
  v->status = RequestStatus::kPreempted;
  ++v->num_preemptions;
  ++preemptions_;
  remove_running(v);
  waiting_.push_back(v);
  plan.preempted.push_back(v->id);
}

int64_t Scheduler::limit_for_media(Request* r, int64_t n, StepPlan& plan, int64_t& enc_budget,
                                   int64_t& budget) {
  const int64_t start = r->num_computed;
  for (const MediaItem& m : r->media)
    if (m.features_skipped && m.begin < start + n && m.begin + m.n_tokens > start &&
        !enc_.contains(m.key) && !encoding_.contains(m.key)) {
      plan.need_media.push_back(r->id);
      return 0;
    }
  for (size_t i = 0; i < r->media.size(); ++i) {
    const MediaItem& m = r->media[i];
    if (m.begin >= start + n || m.begin + m.n_tokens <= start) continue;
    const int64_t before = std::max<int64_t>(0, m.begin - start);  // the chunk cut before m
    auto planned = std::find_if(plan.encoder_jobs.begin(), plan.encoder_jobs.end(),
                                [&](const EncoderJob& j) { return j.key == m.key; });
    if (planned != plan.encoder_jobs.end()) {
      if (planned->last()) continue;  // its output exists once this step's encoder work has run
      return before;
    }
    // The item's last part runs this step: the chunk takes what the parts left of the step's
    // budget (a step-only output, which the cache had no room for, is read whole now).
    auto after_parts = [&] {
      const EncoderJob& j = plan.encoder_jobs.back();
      if (j.keep && j.parts > 1 && pacing_.tokens_per_patch > 0)
        n = std::max(before, std::min(n, budget));
    };
    if (auto e = encoding_.find(m.key); e != encoding_.end()) {  // begun in an earlier step
      if (!plan_parts(r, i, e->second.done, plan, enc_budget, budget) ||
          !plan.encoder_jobs.back().last())
        return before;
      after_parts();
      continue;
    }
    if (enc_.contains(m.key)) {
      // Read from the cache this step: pinned now, so no job reserved later in this plan can
      // evict it before the executor reads it.
      enc_.touch(m.key);
      enc_.pin(m.key);
      pinned_.push_back(m.key);
      continue;
    }
    if (!plan_parts(r, i, 0, plan, enc_budget, budget) || !plan.encoder_jobs.back().last())
      return before;  // stop just before this item
    after_parts();
  }
  return n;
}

bool Scheduler::plan_parts(Request* r, size_t i, int64_t done, StepPlan& plan, int64_t& enc_budget,
                           int64_t& budget) {
  const MediaItem& m = r->media[i];
  const int64_t parts = std::max<int64_t>(1, m.encode_parts);
  // Patches of parts [a, b): the item's cost spread so that the parts' sum is exact.
  auto patches = [&](int64_t a, int64_t b) {
    return m.encoder_cost * b / parts - m.encoder_cost * a / parts;
  };
  // One part always fits a step without other encoder work (never starve a large image).
  const bool first_work = plan.encoder_patches == 0;
  const bool paced = pacing_.tokens_per_patch > 0 && parts > 1;  // charged to the token budget
  int64_t k = parts - done;
  if (paced) {
    while (k > 0 && static_cast<double>(patches(done, done + k)) * pacing_.tokens_per_patch >
                        static_cast<double>(budget))
      --k;
  }
  while (k > 0 && patches(done, done + k) > enc_budget) --k;
  if (paced && pacing_.goal_ns > 0 && pacing_.patch_ns > 0) {  // the time the goal leaves
    const double room = pacing_.goal_ns - pacing_.step_ns -
                        static_cast<double>(plan.encoder_patches) * pacing_.patch_ns;
    while (k > 0 && static_cast<double>(patches(done, done + k)) * pacing_.patch_ns > room) --k;
  }
  // The request's deadline: steps of (step + k parts) until the encoder ends, within half the
  // time left: k >= left x step / (half - left x part).
  if (paced && r->deadline_ns > 0 && pacing_.step_ns > 0) {
    const int64_t left = parts - done;
    const double part_ns =
        pacing_.patch_ns * static_cast<double>(m.encoder_cost) / static_cast<double>(parts);
    const double room =
        0.5 * static_cast<double>(r->deadline_ns - now_) - static_cast<double>(left) * part_ns;
    const int64_t need =
        room <= pacing_.step_ns
            ? left
            : static_cast<int64_t>(std::ceil(static_cast<double>(left) * pacing_.step_ns / room));
    k = std::max(k, std::min(left, need));
  }
  if (k == 0 && first_work) k = 1;
  if (k == 0) return false;
  EncoderJob job{r->id, i, m.key, {}, true};
  job.part_begin = done;
  job.part_end = done + k;
  job.parts = parts;
  if (done == 0) {
    job.input = m.prepared;
    const uint64_t bytes = static_cast<uint64_t>(m.n_tokens) * cfg_.encoder_row_bytes;
    job.keep = enc_.reserve(m.key, bytes, plan.encoder_frees, m.file_hash);
    if (job.keep) enc_.pin(m.key);  // until the last part's step (update)
  } else {
    const Encoding& begun = encoding_.at(m.key);
    job.keep = begun.keep;
    job.input = begun.input;  // the request that began it had the features
  }
  if (job.last()) {
    if (job.keep) pinned_.push_back(m.key);
    encoding_.erase(m.key);
  } else {
    encoding_[m.key] = Encoding{job.part_end, parts, job.keep, job.input};
  }
  const int64_t p = patches(job.part_begin, job.part_end);
  plan.encoder_patches += p;
  enc_budget -= p;
  if (paced)
    budget -= static_cast<int64_t>(std::ceil(static_cast<double>(p) * pacing_.tokens_per_patch));
  plan.encoder_jobs.push_back(std::move(job));
  return true;
}

void Scheduler::drop_orphan_encodes(StepPlan& plan) {
  plan.encoder_drops.swap(dropped_);
  dropped_.clear();
  for (auto it = encoding_.begin(); it != encoding_.end();) {
    auto needs = [&](const Request* r) {
      return std::any_of(r->media.begin(), r->media.end(),
                         [&](const MediaItem& m) { return m.key == it->first; });
    };
    if (std::any_of(running_.begin(), running_.end(), needs) ||
        std::any_of(waiting_.begin(), waiting_.end(), needs)) {
      ++it;
      continue;
    }
    if (it->second.keep) {
      enc_.unpin(it->first);
      enc_.erase(it->first);
    }
    plan.encoder_drops.push_back(it->first);
    it = encoding_.erase(it);
  }
}

StepPlan Scheduler::schedule(int64_t now_ns) {
  StepPlan plan;
  now_ = now_ns;
  std::vector<Request*> chunk_reqs;  // the request of each chunk, in plan order
  int64_t budget = cfg_.token_budget;
  int64_t enc_budget = cfg_.encoder_patch_budget;
  drop_orphan_encodes(plan);
  policy_->order_running(running_, now_ns);
  std::vector<Request*> scheduled;

  // may_preempt: free KV blocks for r by preempting from the back of the running order.
  auto try_schedule = [&](Request* r, bool may_preempt) -> bool {
    int64_t n = std::min(r->num_tokens() - r->num_computed, budget);
    if (n <= 0) return false;
    n = limit_for_media(r, n, plan, enc_budget, budget);
    if (n <= 0) return false;
    while (!kv_.allocate(*r, n)) {
      if (!may_preempt) return false;
      // Preempt from the back of the running order, never a request already in this plan.
      Request* victim = nullptr;
      for (auto it = running_.rbegin(); it != running_.rend(); ++it)
        if (std::find(scheduled.begin(), scheduled.end(), *it) == scheduled.end()) {
          victim = *it;
          break;
        }
      if (!victim) return false;
      preempt(victim, plan, now_ns);
      if (victim == r) return false;
    }
    plan.chunks.push_back(chunk_header(*r, n));
    chunk_reqs.push_back(r);
    scheduled.push_back(r);
    budget -= n;
    return true;
  };

  // 1. Running requests that decode (one new token each), in the running order.
  std::vector<Request*> prefilling;  // running requests still in prefill, in the running order
  for (Request* r : std::vector<Request*>(running_)) {
    if (!r->prefilled()) {
      prefilling.push_back(r);
      continue;
    }
    if (budget <= 0) break;
    if (r->status != RequestStatus::kRunning) continue;  // preempted above
    try_schedule(r, true);
  }
  // 2. Prefill: the running requests' next chunks and the waiting requests, merged in the
  // policy's order for prompts (order_waiting, for both): a waiting request the policy serves
  // before a running one (a platinum arrival before a silver prompt half done, under slo) gets
  // budget first, as admission's queue model assumes, and a prompt already running keeps its
  // place against a later one of a heavier class that can wait (under slo the running order, by
  // class weight, let a stream of platinum prompts starve a gold prompt chunk by chunk past its
  // deadline). Waiting requests are admitted in their own order only (nobody overtakes the
  // waiting head) and not once this step has had to preempt (memory is tight).
  policy_->order_waiting(prefilling, now_ns);
  policy_->order_waiting(waiting_, now_ns);
  size_t next_prefill = 0, next_waiting = 0, admitted = 0;
  bool admitting = true;
  while (budget > 0) {
    const bool have_w = admitting && plan.preempted.empty() && next_waiting < waiting_.size() &&
                        running_.size() + admitted < static_cast<size_t>(cfg_.max_running);
    const bool have_p = next_prefill < prefilling.size();
    if (!have_w && !have_p) break;
    if (have_p && (!have_w || policy_->serves_first(*prefilling[next_prefill],
                                                    *waiting_[next_waiting], now_ns))) {
      Request* r = prefilling[next_prefill++];
      // Once a waiting request took blocks in this step, a running prompt that no longer fits
      // pauses for the step instead of preempting (which would throw its KV away).
      if (r->status == RequestStatus::kRunning) try_schedule(r, admitted == 0);
      continue;
    }
    Request* r = waiting_[next_waiting++];
    int64_t hit = kv_.acquire_cached_prefix(*r);
    int64_t n = std::min(r->num_tokens() - r->num_computed, budget);
    n = limit_for_media(r, n, plan, enc_budget, budget);
    if (n <= 0 || !kv_.allocate(*r, n)) {
      kv_.free(*r);
      r->num_computed = 0;
      r->num_cached_hit = 0;
      // Keep the policy's order: nobody overtakes the head (unless it leaves for its media).
      const bool leaves =
          std::find(plan.need_media.begin(), plan.need_media.end(), r->id) != plan.need_media.end();
      if (!leaves) admitting = false;
      continue;
    }
    if (r->timeline.count(Event::kScheduled) == 0 || r->status == RequestStatus::kPreempted)
      r->timeline.add(Event::kScheduled, now_ns, hit);
    r->status = RequestStatus::kRunning;
    plan.chunks.push_back(chunk_header(*r, n));
    chunk_reqs.push_back(r);
    budget -= n;
    ++admitted;
  }
  // Move the admitted ones to running.
  for (Request* r : chunk_reqs) {
    auto it = std::find(waiting_.begin(), waiting_.end(), r);
    if (it != waiting_.end()) {
      waiting_.erase(it);
      running_.push_back(r);
    }
  }
  describe_chunks(plan, chunk_reqs);
  for (const auto& c : plan.chunks) {
    plan.num_tokens += c.n;
    (c.prefill ? plan.num_prefill_tokens : plan.num_decode_tokens) += c.n;
  }
  return plan;
}

void Scheduler::describe_chunks(StepPlan& plan, const std::vector<Request*>& reqs) {
  const int32_t R = cfg_.position_rows;
  for (size_t k = 0; k < plan.chunks.size(); ++k) {
    ScheduledChunk& c = plan.chunks[k];
    const Request& r = *reqs[k];
    c.prefill = c.start < r.prefill_tokens();
    c.tokens.resize(static_cast<size_t>(c.n));
    for (int64_t i = 0; i < c.n; ++i) c.tokens[static_cast<size_t>(i)] = r.token_at(c.start + i);
    c.rope_delta = r.rope_delta;
    if (!r.positions.empty()) {
      c.positions.resize(static_cast<size_t>(R * c.n));
      for (int row = 0; row < R; ++row)
        for (int64_t i = 0; i < c.n; ++i)
          c.positions[static_cast<size_t>(row * c.n + i)] = r.position_at(row, c.start + i);
    }
    c.block_table = kv_.block_table(r);
    for (size_t i = 0; i < r.media.size(); ++i) {
      const MediaItem& m = r.media[i];
      const int64_t b = std::max(m.begin, c.start),
                    e = std::min(m.begin + m.n_tokens, c.start + c.n);
      if (b >= e) continue;
      c.media.push_back({m.key, b - m.begin, b - c.start, e - b});
      const bool job = std::any_of(plan.encoder_jobs.begin(), plan.encoder_jobs.end(),
                                   [&](const EncoderJob& j) { return j.key == m.key; });
      // Hit-rate books: an item whose span starts in this step either has a job (a miss, counted
      // with the job below) or was found in the cache (a hit).
      if (m.begin >= c.start && !job) enc_.lookup(m.key);
    }
    if (c.sample) {
      c.sampling.settings = r.sampling.sampler();
      c.sampling.draw = r.output.size();
      c.sampling.logprobs = r.sampling.logprobs;
      if (c.sampling.settings.needs_history()) {
        c.sampling.prompt = r.prompt;
        c.sampling.output = r.output;
      }
    }
  }
  for (const EncoderJob& j : plan.encoder_jobs)
    if (j.first()) enc_.record_miss();  // an item encoded in parts: once
}

std::vector<Request*> Scheduler::abort(const StepPlan& plan) {
  for (const EncoderJob& j : plan.encoder_jobs) {
    if (j.keep) {
      if (!j.last()) enc_.unpin(j.key);  // held from its first part (a last one: in pinned_)
      enc_.erase(j.key);                 // its output was never stored
    }
    encoding_.erase(j.key);
    if (j.parts > 1) dropped_.push_back(j.key);  // the executor's part-done encode, if any
  }
  for (const Hash128& k : pinned_) enc_.unpin(k);
  pinned_.clear();
  std::vector<Request*> in_plan;
  auto add = [&](RequestId id) {
    auto it = by_id_.find(id);
    if (it != by_id_.end() &&
        std::find(in_plan.begin(), in_plan.end(), it->second) == in_plan.end())
      in_plan.push_back(it->second);
  };
  for (const auto& c : plan.chunks) add(c.id);
  for (const EncoderJob& j : plan.encoder_jobs) add(j.owner);
  return in_plan;
}

std::vector<Request*> Scheduler::update(const StepPlan& plan, const StepOutput& out,
                                        int64_t now_ns) {
  for (const Hash128& k : pinned_) enc_.unpin(k);
  pinned_.clear();
  bool split = false;
  for (const EncoderJob& j : plan.encoder_jobs) {
    encoder_runs_ += j.first() ? 1 : 0;
    split |= !j.last();
  }
  encoder_split_steps_ += split ? 1 : 0;
  for (size_t i = 0; i < plan.encoder_jobs.size() && i < out.encoder.size(); ++i) {
    auto it = by_id_.find(plan.encoder_jobs[i].owner);
    if (it == by_id_.end()) continue;
    const EncoderJob& j = plan.encoder_jobs[i];
    const auto media = static_cast<int64_t>(j.media);
    // An item encoded in parts: from its first part's start to its last's end.
    if (j.first()) it->second->timeline.add(Event::kEncoderStart, out.encoder[i].start_ns, media);
    if (j.last()) it->second->timeline.add(Event::kEncoderEnd, out.encoder[i].end_ns, media);
  }
  std::vector<Request*> changed;
  size_t s = 0;
  for (const auto& c : plan.chunks) {
    auto found = by_id_.find(c.id);
    Request* r = found == by_id_.end() ? nullptr : found->second;
    if (!r || r->status != RequestStatus::kRunning) {  // finished while the step ran (cancel)
      if (c.sample) ++s;
      continue;
    }
    r->num_computed += c.n;
    kv_.commit(*r);
    if (c.prefill) r->timeline.add(Event::kPrefillChunk, now_ns, c.n);
    if (!c.sample) continue;
    if (s >= out.sampled.size())
      throw InternalError("step output has fewer sampled tokens than the plan");
    const size_t si = s;
    int32_t tok = out.sampled[s++];
    const auto& sp = r->sampling;
    bool stop = !sp.ignore_eos &&
                std::find(r->stop_ids.begin(), r->stop_ids.end(), tok) != r->stop_ids.end();
    stop |= std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), tok) !=
            sp.stop_token_ids.end();
    r->timeline.add(r->generated() == 0 && r->timeline.count(Event::kFirstToken) == 0
                        ? Event::kFirstToken
                        : Event::kToken,
                    now_ns, tok);
    if (stop) {
      finish(r, Outcome::kStopped, now_ns);
    } else {
      r->output.push_back(tok);
      if (si < out.logprobs.size() && sp.logprobs >= 0)
        r->output_logprobs.push_back(std::move(out.logprobs[si]));
      const bool at_context = r->max_total_tokens > 0 && r->num_tokens() >= r->max_total_tokens;
      if (static_cast<int32_t>(r->output.size()) >= sp.max_tokens || at_context)
        finish(r, Outcome::kFinished, now_ns);
    }
    changed.push_back(r);
  }
  return changed;
}

void Scheduler::withdraw(Request* r) {
  kv_.free(*r);
  r->num_computed = 0;
  r->num_cached_hit = 0;
  r->status = RequestStatus::kWaiting;
  remove_running(r);
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
  by_id_.erase(r->id);
}

void Scheduler::finish(Request* r, Outcome outcome, int64_t now_ns, const std::string& reason) {
  if (r->status == RequestStatus::kDone) return;
  kv_.free(*r);
  remove_running(r);
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
  by_id_.erase(r->id);
  r->status = RequestStatus::kDone;
  r->outcome = outcome;
  r->reason = reason;
  r->timeline.add(Event::kFinished, now_ns, static_cast<int64_t>(outcome));
}

StepFeatures step_features(const StepPlan& plan) {
  StepFeatures f;
  f.prefill_tokens = static_cast<double>(plan.num_prefill_tokens);
  f.decode_tokens = static_cast<double>(plan.num_decode_tokens);
  f.encoder_patches = static_cast<double>(plan.encoder_patches);
  // An item's fixed cost comes with its first part.
  f.encoder_items =
      static_cast<double>(std::count_if(plan.encoder_jobs.begin(), plan.encoder_jobs.end(),
                                        [](const EncoderJob& j) { return j.first(); }));
  for (const auto& c : plan.chunks) {
    f.context_tokens += static_cast<double>(c.start + c.n);
    if (c.prefill)
      f.prefill_pairs +=
          causal_pairs(static_cast<double>(c.start), static_cast<double>(c.start + c.n));
  }
  return f;
}

double encoder_ns(const StepOutput& out) {
  double ns = 0;
  for (const EncoderTiming& t : out.encoder) ns += static_cast<double>(t.end_ns - t.start_ns);
  return ns;
}

}  // namespace mmrt::engine
