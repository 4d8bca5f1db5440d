#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "core/clock.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/executor.h"
#include "io/generation_config.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "media/qwen2_vl.h"
#include "models/qwen2_vl/processor.h"
#include "models/qwen2_vl/vision_tower.h"

namespace fs = std::filesystem;

namespace mmrt::engine {

// ---- handles -------------------------------------------------------------------------------

struct RequestHandle::State {
  RequestId id = 0;
  Engine::Impl* engine = nullptr;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<StreamEvent> events;
  bool done = false;
  RequestResult result;
};

RequestId RequestHandle::id() const {
  return s_->id;
}

std::optional<StreamEvent> RequestHandle::next(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lk(s_->mu);
  auto ready = [&] { return !s_->events.empty() || s_->done; };
  if (timeout_ms < 0)
    s_->cv.wait(lk, ready);
  else if (!s_->cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), ready))
    return std::nullopt;
  if (!s_->events.empty()) {
    StreamEvent e = std::move(s_->events.front());
    s_->events.pop_front();
    return e;
  }
  return StreamEvent{StreamEvent::Kind::kDone, "", s_->result.outcome, s_->result.reason};
}

RequestResult RequestHandle::wait() {
  std::unique_lock<std::mutex> lk(s_->mu);
  s_->cv.wait(lk, [&] { return s_->done; });
  return s_->result;
}

// ---- engine --------------------------------------------------------------------------------

namespace {
struct Entry {
  std::unique_ptr<Request> req;
  std::shared_ptr<RequestHandle::State> state;
  std::vector<std::vector<uint8_t>> images;  // until preprocessed
  std::unique_ptr<io::StreamingDetokenizer> detok;
  std::unique_ptr<StopStringMatcher> stops;
  std::string text;
  bool cancel_requested = false;
};
}  // namespace

struct Engine::Impl {
  EngineConfig cfg;
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<io::Tokenizer> tok;
  io::GenerationConfig gen;
  std::unique_ptr<models::LanguageModel> lm;
  std::unique_ptr<models::VisionTower> vision;
  std::unique_ptr<io::SafeTensors> st;
  std::unique_ptr<KvBlockManager> kv;
  std::unique_ptr<EncoderCache> enc;
  std::unique_ptr<Scheduler> sched;
  std::unique_ptr<Executor> exec;
  Hash128 model_key;
  CostModel cost;
  std::unique_ptr<BatchController> bc;
  // Requests admitted in the last kInflowWindowNs (step-loop thread only): the rate at which
  // work arrives that may overtake a waiting request (see admit()).
  struct Admitted {
    int64_t t_ns;
    double tokens, patches, weight;
    int32_t priority;
  };
  static constexpr int64_t kInflowWindowNs = 5'000'000'000;
  std::deque<Admitted> recent_admits;
  // Per class weight: log(actual / modelled) TTFT of the last admitted requests; their mean
  // corrects the queue model's bias for that class (step-loop thread only).
  static constexpr size_t kBiasWindow = 64;
  std::map<double, std::deque<double>> ttft_log_bias;
  int64_t first_admit_ns = -1;

  mutable std::mutex mu;
  std::condition_variable cv, idle_cv;
  bool stopping = false;
  std::deque<Entry*> media_queue;  // waiting for preprocessing
  std::deque<Entry*> ready;        // preprocessed, for the step loop
  std::vector<RequestId> cancels;
  std::unordered_map<RequestId, std::unique_ptr<Entry>> entries;  // all in flight
  RequestId next_id = 1;
  int64_t in_flight = 0;
  EngineStats stats;
  int64_t encoder_runs = 0;
  std::thread loop;
  std::vector<std::thread> media_workers;

  void publish_text(Entry& e, const std::string& t) {
    if (t.empty()) return;
    e.text += t;
    std::lock_guard<std::mutex> lk(e.state->mu);
    e.state->events.push_back({StreamEvent::Kind::kText, t});
    e.state->cv.notify_all();
  }

  // Ends an entry's life: result, final event, removal. Caller holds no engine lock.
  void complete(Entry& e, Outcome outcome, const std::string& reason) {
    Request& r = *e.req;
    if (r.outcome == Outcome::kNone) {
      r.outcome = outcome;
      r.reason = reason;
      r.status = RequestStatus::kDone;
      r.timeline.add(Event::kFinished, now_ns(), static_cast<int64_t>(outcome));
    }
    if (r.outcome == Outcome::kFinished || r.outcome == Outcome::kStopped) {
      if (e.detok && !e.stops->finished()) publish_text(e, e.stops->push(e.detok->flush()));
      if (e.stops) publish_text(e, e.stops->flush());
    }
    RequestResult res;
    res.id = r.id;
    res.text = e.text;
    res.tokens = r.output;
    res.outcome = r.outcome;
    res.reason = r.reason;
    res.prompt_tokens = static_cast<int64_t>(r.prompt.size());
    res.cached_prompt_tokens = r.num_cached_hit;
    res.preemptions = r.num_preemptions;
    res.sla_class = r.sla_class;
    res.predicted_ttft_ns = r.predicted_ttft_ns;
    res.deadline_ns = r.deadline_ns;
    res.tpot_target_ns = r.tpot_target_ns;
    res.timeline = r.timeline;
    {
      // Counted before the handle is signalled: a caller reading stats() after its result sees it.
      std::lock_guard<std::mutex> lk(mu);
      ++stats.finished;
    }
    {
      std::lock_guard<std::mutex> lk(e.state->mu);
      e.state->result = std::move(res);
      e.state->events.push_back({StreamEvent::Kind::kDone, "", r.outcome, r.reason});
      e.state->done = true;
      e.state->cv.notify_all();
    }
    std::lock_guard<std::mutex> lk(mu);
    entries.erase(r.id);
    if (--in_flight == 0) idle_cv.notify_all();
  }

  Hash128 media_key(const std::vector<uint8_t>& bytes, const Hash128& tenant_salt) const {
    Hasher h;
    h.update(hash128(bytes.data(), bytes.size()))
        .update(model_key)
        .update(cfg.processor_tag)
        .update(tenant_salt);
    return h.digest();
  }

  void media_worker() {
    for (;;) {
      Entry* e = nullptr;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stopping || !media_queue.empty(); });
        if (stopping) return;
        e = media_queue.front();
        media_queue.pop_front();
      }
      Request& r = *e->req;
      try {
        std::vector<models::GridThw> grids;
        std::vector<PreparedImage> prepared;
        for (const auto& bytes : e->images) {
          prepared.push_back(cfg.preprocess(bytes));
          grids.push_back(prepared.back().grid);
        }
        auto p = models::expand_image_prompt(r.prompt, grids, lm->config());
        r.prompt = std::move(p.ids);
        r.positions = std::move(p.positions);
        r.rope_delta = p.rope_delta;
        for (size_t i = 0; i < prepared.size(); ++i) {
          MediaItem m;
          m.key = media_key(e->images[i], r.tenant_salt);
          m.pixel_values = std::move(prepared[i].pixel_values);
          m.grid = prepared[i].grid;
          m.begin = p.images[i].begin;
          m.n_tokens = p.images[i].n_tokens;
          r.media.push_back(std::move(m));
        }
        e->images.clear();
        r.timeline.add(Event::kMediaDecoded, now_ns(), static_cast<int64_t>(prepared.size()));
        check_fits(r);
      } catch (const Error& err) {
        fail_later(e, Outcome::kFailed,
                   std::string(error_code_name(err.code())) + ": " + err.what());
        continue;
      } catch (const std::exception& err) {
        fail_later(e, Outcome::kFailed, std::string("internal: ") + err.what());
        continue;
      }
      std::lock_guard<std::mutex> lk(mu);
      ready.push_back(e);
      cv.notify_all();
    }
  }

  std::vector<std::pair<Entry*, std::pair<Outcome, std::string>>> to_fail;  // guarded by mu
  void fail_later(Entry* e, Outcome o, std::string reason) {
    std::lock_guard<std::mutex> lk(mu);
    to_fail.push_back({e, {o, std::move(reason)}});
    cv.notify_all();
  }

  void check_fits(const Request& r) const {
    const int64_t need = static_cast<int64_t>(r.prompt.size()) + r.sampling.max_tokens;
    const int64_t have = static_cast<int64_t>(kv->num_blocks()) * kv->block_size();
    if (need > have)
      throw ResourceExhausted("request needs " + std::to_string(need) +
                              " tokens of KV cache (prompt " + std::to_string(r.prompt.size()) +
                              " + max_tokens " + std::to_string(r.sampling.max_tokens) +
                              "), the cache holds " + std::to_string(have));
  }

  void step_loop() {
    for (;;) {
      try {
        if (!step_once()) return;
      } catch (const std::exception& err) {
        // Never let the loop die: fail whatever is scheduled and go on serving.
        std::fprintf(stderr, "mmrt engine: step failed: %s\n", err.what());
        std::vector<Request*> all(sched->running().begin(), sched->running().end());
        for (Request* r : all) {
          sched->finish(r, Outcome::kFailed, now_ns(), std::string("internal: ") + err.what());
          complete(*entry_of(r), Outcome::kFailed, r->reason);
        }
      }
    }
  }

  // One iteration of the step loop; false when the engine stops.
  bool step_once() {
    {
      std::vector<Entry*> new_ready;
      std::vector<RequestId> new_cancels;
      std::vector<std::pair<Entry*, std::pair<Outcome, std::string>>> fails;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] {
          return stopping || !ready.empty() || !cancels.empty() || !to_fail.empty() ||
                 !sched->idle();
        });
        if (stopping) return false;
        new_ready.assign(ready.begin(), ready.end());
        ready.clear();
        new_cancels.swap(cancels);
        fails.swap(to_fail);
      }
      for (auto& [e, f] : fails) complete(*e, f.first, f.second);
      const int64_t now = now_ns();
      for (Entry* e : new_ready) {
        if (e->cancel_requested) {
          complete(*e, Outcome::kCancelled, "");
          continue;
        }
        std::string why;
        if (!admit(*e->req, now, why)) {
          complete(*e, Outcome::kRefused, why);
          continue;
        }
        sched->add(e->req.get(), now);
      }
      for (RequestId id : new_cancels) {
        Entry* e = nullptr;
        {
          std::lock_guard<std::mutex> lk(mu);
          auto it = entries.find(id);
          if (it == entries.end()) continue;
          e = it->second.get();
          e->cancel_requested = true;  // if still in media, dropped when it comes out
        }
        Request* r = e->req.get();
        bool in_sched = std::find(sched->running().begin(), sched->running().end(), r) !=
                            sched->running().end() ||
                        std::find(sched->waiting().begin(), sched->waiting().end(), r) !=
                            sched->waiting().end();
        if (in_sched) {
          sched->finish(r, Outcome::kCancelled, now_ns());
          complete(*e, Outcome::kCancelled, "");
        }
      }
      if (cfg.admission_control) expire_late(now);
      if (sched->idle()) return true;
      int64_t tpot_target = 0;
      if (bc) {
        for (const Request* r : sched->running())
          if (r->tpot_target_ns > 0 && (tpot_target == 0 || r->tpot_target_ns < tpot_target))
            tpot_target = r->tpot_target_ns;
        const RunningLoad load = running_load();
        sched->set_token_budget(bc->next_budget(cost, tpot_target, load.n_decode, load.context));
      }
      StepPlan plan = sched->schedule(now_ns());
      if (plan.empty()) {
        // Nothing fits even with the running set empty: the head request can never run.
        if (sched->num_running() == 0 && sched->num_waiting() > 0) {
          Request* r = sched->waiting().front();
          sched->finish(r, Outcome::kFailed, now_ns(),
                        "resource_exhausted: not enough KV cache for the prompt");
          complete(*entry_of(r), Outcome::kFailed, r->reason);
        }
        return true;
      }
      StepOutput out;
      try {
        out = exec->execute(plan);
      } catch (const std::exception& err) {
        // A failed step fails the requests in it; everyone else goes on.
        for (const auto& c : plan.chunks) {
          sched->finish(c.req, Outcome::kFailed, now_ns(), std::string("internal: ") + err.what());
          complete(*entry_of(c.req), Outcome::kFailed, c.req->reason);
        }
        return true;
      }
      encoder_runs += static_cast<int64_t>(plan.encoder_jobs.size());
      {
        StepFeatures f;
        f.prefill_tokens = static_cast<double>(plan.num_prefill_tokens);
        f.decode_tokens = static_cast<double>(plan.num_decode_tokens);
        f.encoder_patches = static_cast<double>(plan.encoder_patches);
        for (const auto& c : plan.chunks) f.context_tokens += static_cast<double>(c.start + c.n);
        {
          std::lock_guard<std::mutex> lk(mu);  // stats() reads the cost model
          cost.observe(f, static_cast<double>(out.step_ns));
        }
        if (bc) bc->observe(static_cast<double>(out.step_ns), tpot_target);
      }
      std::vector<Request*> changed = sched->update(plan, out, now_ns());
      {
        std::lock_guard<std::mutex> lk(mu);
        ++stats.steps;
      }
      for (Request* r : changed) {
        Entry& e = *entry_of(r);
        if (r->predicted_ttft_ns > 0 && r->timeline.count(Event::kToken) == 0 &&
            r->output.size() <= 1) {
          const double actual =
              static_cast<double>(r->timeline.first(Event::kFirstToken) - r->arrival_ns);
          if (r->model_ttft_ns > 0 && actual > 0) {
            auto& log_bias = ttft_log_bias[r->weight];
            log_bias.push_back(
                std::clamp(std::log(actual / static_cast<double>(r->model_ttft_ns)), -3.0, 3.0));
            if (log_bias.size() > kBiasWindow) log_bias.pop_front();
          }
          std::lock_guard<std::mutex> lk(mu);
          cost.record_ttft(static_cast<double>(r->predicted_ttft_ns), actual);
        }
        try {
          if (!r->finished()) {
            publish_text(e, e.stops->push(detokenize(e, r->output.back())));
            if (e.stops->finished()) sched->finish(r, Outcome::kStopped, now_ns());
          } else if (r->outcome == Outcome::kFinished && !r->output.empty()) {
            publish_text(e, e.stops->push(detokenize(e, r->output.back())));
            if (e.stops->finished()) r->outcome = Outcome::kStopped;
          }
        } catch (const std::exception& err) {
          sched->finish(r, Outcome::kFailed, now_ns(), std::string("internal: ") + err.what());
        }
        if (r->finished()) complete(e, r->outcome, r->reason);
      }
    }
    return true;
  }

  // What the running requests add to every step: how many decode, and the KV tokens they attend.
  struct RunningLoad {
    int64_t n_decode = 0;
    double context = 0;
  };
  RunningLoad running_load() const {
    RunningLoad l;
    for (const Request* q : sched->running()) {
      l.n_decode += q->prefilled();
      l.context += static_cast<double>(q->num_computed);
    }
    return l;
  }

  // Encoder patches of q's images still ahead of its prefill and not in the encoder cache.
  double uncached_patches(const Request& q) const {
    double p = 0;
    for (const auto& m : q.media)
      if (m.begin + m.n_tokens > q.num_computed && !enc->contains(m.key))
        p += static_cast<double>(m.n_patches());
    return p;
  }

  // The cost model's bias for a class weight, learned from the first tokens of admitted requests
  // (the geometric mean of actual / modelled TTFT over the last kBiasWindow, clamped to
  // 0.25-4x; 1 before 8 samples): a class the model over-predicts would otherwise be refused for
  // nothing, one it under-predicts admitted to miss.
  double ttft_bias(double weight) const {
    auto it = ttft_log_bias.find(weight);
    if (it == ttft_log_bias.end() || it->second.size() < 8) return 1;
    double m = 0;
    for (double v : it->second) m += v;
    return std::clamp(std::exp(m / static_cast<double>(it->second.size())), 0.25, 4.0);
  }

  // The late half of admission control: a request without its first token yet (waiting, or
  // running its prefill) whose first token can no longer come by its deadline, even if its
  // remaining prefill and encoder work ran from now on, gets its class's rule again (refuse, or
  // downgrade to a class it can still meet). Serving it would spend the engine (and hold KV
  // blocks) on a promise already broken, at the expense of requests that can still be served in
  // time.
  void expire_late(int64_t now) {
    std::vector<std::pair<Request*, int64_t>> late;  // with its predicted TTFT (from arrival)
    const RunningLoad load = running_load();
    const int64_t budget = sched->token_budget();
    auto check = [&](Request* r, double own) {
      if (r->deadline_ns == 0 || !r->output.empty()) return;
      // As admission predicts (the same form, with the class's learned bias), but with no work
      // ahead: a request admitted in this pass is never refused in the same one.
      const double need = cost.predict_ttft_ns(own, uncached_patches(*r), 0, 0, load.n_decode,
                                               load.context, budget);
      const double ttft = (static_cast<double>(now - r->arrival_ns) + need) * ttft_bias(r->weight);
      if (static_cast<double>(r->arrival_ns) + ttft > static_cast<double>(r->deadline_ns))
        late.emplace_back(r, static_cast<int64_t>(ttft));
    };
    for (Request* r : sched->waiting())
      check(r, static_cast<double>(r->num_tokens() - kv->cached_prefix_tokens(*r)));
    for (Request* r : sched->running())
      check(r, static_cast<double>(r->num_tokens() - r->num_computed));
    for (auto [r, ttft] : late) {
      const SlaConfig::MissAction m = cfg.sla.on_miss(r->sla_class, ttft);
      if (m.action == OnMiss::kAccept) continue;
      if (m.action == OnMiss::kDowngrade) {
        downgrade(*r, m.to);
        std::lock_guard<std::mutex> lk(mu);
        ++stats.downgraded_late;
        continue;
      }
      char buf[192];
      std::snprintf(buf, sizeof buf,
                    "unavailable: %.0f ms after arrival its first token can no longer come "
                    "within the %s class's %.0f ms",
                    static_cast<double>(now - r->arrival_ns) * 1e-6,
                    r->sla_class.empty() ? "requested" : r->sla_class.c_str(),
                    static_cast<double>(r->deadline_ns - r->arrival_ns) * 1e-6);
      sched->finish(r, Outcome::kRefused, now, buf);
      complete(*entry_of(r), Outcome::kRefused, r->reason);
      std::lock_guard<std::mutex> lk(mu);
      ++stats.refused;
      ++stats.refused_late;
    }
  }

  // Moves r to class `to` (its promise, weight and deadline from arrival).
  void downgrade(Request& r, int to) {
    const SlaClass& lower = cfg.sla.classes[static_cast<size_t>(to)];
    r.sla_class = lower.name;
    r.weight = lower.weight;
    r.deadline_ns = lower.ttft_ns ? r.arrival_ns + lower.ttft_ns : 0;
    r.tpot_target_ns = lower.tpot_ns;
    std::lock_guard<std::mutex> lk(mu);
    ++stats.downgraded;
  }

  // Admission control: predicts the request's time to first token from the cost model and the
  // work queued ahead of it; a request that would miss its class is refused, downgraded or
  // accepted as its class says. Returns false (with the reason) to refuse.
  bool admit(Request& r, int64_t now, std::string& why) {
    if (!cfg.admission_control || r.deadline_ns == 0) return true;
    // Work to do before r's first token: its own prompt past the cached prefix and its images
    // not in the encoder cache, plus the same for every request the policy serves first.
    const double own = static_cast<double>(r.num_tokens() - kv->cached_prefix_tokens(r));
    const double own_patches = uncached_patches(r);
    double queued = 0, queued_patches = 0;
    const Policy& policy = sched->policy();
    for (const Request* q : sched->running()) {
      if (!q->prefilled() && policy.serves_first(*q, r, now)) {
        queued += static_cast<double>(q->num_tokens() - q->num_computed);
        queued_patches += uncached_patches(*q);
      }
    }
    const RunningLoad load = running_load();
    for (const Request* q : sched->waiting()) {
      if (!policy.serves_first(*q, r, now)) continue;
      queued += static_cast<double>(q->num_tokens() - kv->cached_prefix_tokens(*q));
      queued_patches += uncached_patches(*q);
    }
    const int64_t budget = sched->token_budget();  // as the batch controller set it
    const double pred0 = cost.predict_ttft_ns(own, own_patches, queued, queued_patches,
                                              load.n_decode, load.context, budget);
    // Requests arriving while r waits that the policy serves first (heavier classes under slo)
    // stretch its wait: their work arrives at the rate measured over the last admissions, a
    // share rho of the engine's time, so r waits pred0 / (1 - rho) (a priority queue's
    // waiting time). rho near 1: lighter classes cannot start at all.
    while (!recent_admits.empty() && now - recent_admits.front().t_ns > kInflowWindowNs)
      recent_admits.pop_front();
    double in_tokens = 0, in_patches = 0;
    Request later;
    for (const Admitted& a : recent_admits) {
      later.weight = a.weight;
      later.priority = a.priority;
      if (policy.overtakes(later, r)) {
        in_tokens += a.tokens;
        in_patches += a.patches;
      }
    }
    double rho = 0;
    if (in_tokens + in_patches > 0 && first_admit_ns >= 0) {
      const double window_ns = std::max<double>(
          1e9, static_cast<double>(std::min(kInflowWindowNs, now - first_admit_ns)));
      // The inflow's marginal cost (its prefill and encoder work on top of steps the engine
      // runs anyway): whole steps would count the running decoders' share once more.
      rho = std::max(0.0, cost.predict_ns({in_tokens, 0, in_patches, 0}) - cost.predict_ns({})) /
            window_ns;
    }
    const double pred = rho < 0.95 ? pred0 / (1 - rho) : 1e12;  // 1000 s: never starts
    const int64_t elapsed = now - r.arrival_ns;
    r.model_ttft_ns = elapsed + static_cast<int64_t>(pred);
    r.predicted_ttft_ns = static_cast<int64_t>(
        std::min(1e12, static_cast<double>(r.model_ttft_ns) * ttft_bias(r.weight)));
    auto admitted = [&] {
      if (first_admit_ns < 0) first_admit_ns = now;
      recent_admits.push_back({now, own, own_patches, r.weight, r.priority});
      return true;
    };
    if (r.arrival_ns + r.predicted_ttft_ns <= r.deadline_ns) return admitted();
    const SlaConfig::MissAction m = cfg.sla.on_miss(r.sla_class, r.predicted_ttft_ns);
    if (m.action == OnMiss::kAccept) return admitted();
    if (m.action == OnMiss::kDowngrade) {
      downgrade(r, m.to);
      return admitted();
    }
    char buf[256];
    std::snprintf(
        buf, sizeof buf,
        "unavailable: predicted time to first token %.0f ms exceeds the %s class's %.0f ms "
        "(%.0f prompt tokens queued ahead; requests served before it take %.0f%% of the engine)",
        static_cast<double>(r.predicted_ttft_ns) * 1e-6,
        r.sla_class.empty() ? "requested" : r.sla_class.c_str(),
        static_cast<double>(r.deadline_ns - r.arrival_ns) * 1e-6, queued, 100 * std::min(rho, 1.0));
    why = buf;
    std::lock_guard<std::mutex> lk(mu);
    ++stats.refused;
    return false;
  }

  // Text of a generated token. Ids past the tokenizer (a checkpoint's padded vocabulary rows)
  // or unassigned inside it have no text.
  std::string detokenize(Entry& e, int32_t id) {
    if (id < 0 || id >= tok->vocab_size()) return {};
    try {
      return e.detok->push(id);
    } catch (const InvalidArgument&) {
      return {};  // an id the tokenizer leaves unassigned (a gap in its vocabulary)
    }
  }

  Entry* entry_of(Request* r) {
    std::lock_guard<std::mutex> lk(mu);
    return entries.at(r->id).get();
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Engine> Engine::create(const EngineConfig& cfg) {
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.cfg = cfg;
  const fs::path dir(cfg.model_dir);
  m.tok =
      std::make_unique<io::Tokenizer>(io::Tokenizer::from_file((dir / "tokenizer.json").string()));
  m.gen = io::load_generation_config((dir / "generation_config.json").string());
  m.backend = std::make_unique<kernels::Backend>(cfg.backend);
  m.lm = models::LanguageModel::load(*m.backend, cfg.model_dir, cfg.model);
  m.st = std::make_unique<io::SafeTensors>(io::SafeTensors::open(cfg.model_dir));
  m.vision = models::VisionTower::load(*m.backend, *m.st, m.lm->config(), m.lm->weight_format());
  {
    std::ifstream f(dir / "config.json");
    std::stringstream ss;
    ss << f.rdbuf();
    m.model_key = hash128(ss.str());
  }
  const auto& kvc = m.lm->kv_cache().config();
  m.kv = std::make_unique<KvBlockManager>(kvc.num_blocks, kvc.block_size, cfg.prefix_caching);
  m.enc = std::make_unique<EncoderCache>(cfg.encoder_cache_bytes);
  m.sched = std::make_unique<Scheduler>(
      cfg.scheduler, *m.kv, *m.enc, make_policy(cfg.policy, {&m.cost, cfg.sla.max_starvation_ns}));
  if (cfg.batch_controller) {
    BatchControllerConfig b = cfg.batch;
    b.max_budget = cfg.scheduler.token_budget;
    m.bc = std::make_unique<BatchController>(b);
  }
  m.exec = std::make_unique<ModelExecutor>(*m.lm, m.vision.get(), *m.kv, *m.enc);
  if (!m.cfg.preprocess) {
    // The checkpoint's own preprocessor settings; each media worker preprocesses one image on
    // its own thread (no pool: the worker's thread alone), so media work never waits on model
    // steps. Buffers come from the backend's cache.
    fs::path pp = dir / "preprocessor_config.json";
    auto pcfg = fs::exists(pp) ? media::ImageProcessorConfig::load(pp.string())
                               : media::ImageProcessorConfig{};
    media::MediaContext ctx{
        .pool = nullptr, .isa = m.backend->isa(), .buffers = m.backend->buffers()};
    m.cfg.preprocess = [pcfg, ctx](std::span<const uint8_t> bytes) {
      media::PreprocessOptions o;
      o.mode = media::PreprocessMode::kFast;
      o.ctx = ctx;
      media::QwenImageInputs in = media::preprocess_qwen2_vl(bytes, pcfg, o);
      return PreparedImage{in.pixel_values, {in.grid_t, in.grid_h, in.grid_w}};
    };
  }
  m.stats.kv_blocks_total = kvc.num_blocks;
  Impl* raw = impl.get();
  raw->loop = std::thread([raw] { raw->step_loop(); });
  for (int i = 0; i < std::max(1, cfg.media_threads); ++i)
    raw->media_workers.emplace_back([raw] { raw->media_worker(); });
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->loop.joinable()) impl_->loop.join();
  for (auto& t : impl_->media_workers) t.join();
  // Whatever is still in flight ends as cancelled.
  std::vector<Entry*> left;
  for (auto& [id, e] : impl_->entries) left.push_back(e.get());
  for (Entry* e : left) impl_->complete(*e, Outcome::kCancelled, "engine shut down");
}

RequestHandle Engine::submit(GenerateRequest g) {
  Impl& m = *impl_;
  auto entry = std::make_unique<Entry>();
  auto state = std::make_shared<RequestHandle::State>();
  auto req = std::make_unique<Request>();
  Request& r = *req;
  {
    std::lock_guard<std::mutex> lk(m.mu);
    r.id = m.next_id++;
    ++m.stats.submitted;
    ++m.in_flight;
  }
  state->id = r.id;
  state->engine = &m;
  r.arrival_ns = now_ns();
  r.timeline.add(Event::kReceived, r.arrival_ns);
  r.tenant = g.tenant;
  r.tenant_salt = hash128("tenant:" + g.tenant);
  r.priority = g.priority;
  r.sla_class = g.sla_class.empty() ? m.cfg.sla.default_class : g.sla_class;
  r.sampling = g.sampling;
  r.stop_ids = m.gen.eos_token_ids;
  r.stop_ids.push_back(static_cast<int32_t>(m.lm->config().eos_token_id));
  entry->req = std::move(req);
  entry->state = state;
  Entry* e = entry.get();
  {
    std::lock_guard<std::mutex> lk(m.mu);
    m.entries.emplace(r.id, std::move(entry));
  }
  try {
    const SlaClass& cls = m.cfg.sla.get(r.sla_class);
    r.weight = cls.weight;
    r.deadline_ns = g.ttft_deadline_ns ? r.arrival_ns + g.ttft_deadline_ns
                    : cls.ttft_ns      ? r.arrival_ns + cls.ttft_ns
                                       : 0;
    r.tpot_target_ns = g.tpot_target_ns ? g.tpot_target_ns : cls.tpot_ns;
    r.sampling.validate();
    r.sampler = std::make_unique<Sampler>(r.sampling);
    if (!g.prompt_ids.empty()) {
      r.prompt = g.prompt_ids;
      const int32_t V = static_cast<int32_t>(m.lm->config().text.vocab_size);
      for (int32_t t : r.prompt)
        if (t < 0 || t >= V)
          throw InvalidArgument("prompt token id " + std::to_string(t) + " is outside [0, " +
                                std::to_string(V) + ")");
    } else {
      if (g.messages.empty()) throw InvalidArgument("request has no messages and no prompt ids");
      size_t n_img = 0;
      for (const auto& msg : g.messages)
        for (const auto& p : msg.content) n_img += p.kind == io::ContentPart::Kind::kImage;
      if (n_img != g.images.size())
        throw InvalidArgument("the messages hold " + std::to_string(n_img) + " image parts but " +
                              std::to_string(g.images.size()) + " images were attached");
      r.prompt = m.tok->encode(io::render_qwen2_vl_chat(g.messages));
    }
    if (r.prompt.empty()) throw InvalidArgument("the prompt is empty");
    e->detok = std::make_unique<io::StreamingDetokenizer>(*m.tok);
    e->stops = std::make_unique<StopStringMatcher>(r.sampling.stop);
    if (g.images.empty()) m.check_fits(r);
  } catch (const Error& err) {
    m.complete(*e, Outcome::kRefused, std::string(error_code_name(err.code())) + ": " + err.what());
    return RequestHandle(state);
  }
  {
    std::lock_guard<std::mutex> lk(m.mu);
    if (g.images.empty()) {
      m.ready.push_back(e);
    } else {
      e->images = std::move(g.images);
      m.media_queue.push_back(e);
    }
  }
  m.cv.notify_all();
  return RequestHandle(state);
}

void RequestHandle::cancel() {
  if (s_->engine) {
    std::lock_guard<std::mutex> lk(s_->engine->mu);
    s_->engine->cancels.push_back(s_->id);
  }
  if (s_->engine) s_->engine->cv.notify_all();
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->cancels.push_back(id);
  }
  impl_->cv.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  EngineStats s = impl_->stats;
  // The books below are only written by the step loop; a racy read is fine for reporting.
  s.preemptions = impl_->sched->total_preemptions();
  s.prefix_query_tokens = impl_->kv->stats().prefix_query_tokens;
  s.prefix_hit_tokens = impl_->kv->stats().prefix_hit_tokens;
  s.encoder_hits = impl_->enc->stats().hits;
  s.encoder_misses = impl_->enc->stats().misses;
  s.encoder_runs = impl_->encoder_runs;
  s.kv_blocks_used = impl_->kv->num_used_blocks();
  s.waiting = impl_->sched->num_waiting();
  s.token_budget = impl_->sched->token_budget();
  s.ttft_prediction = impl_->cost.ttft_error();
  s.cost_coefficients_ns = impl_->cost.coefficients_ns();
  s.running = impl_->sched->num_running();
  return s;
}

const io::Qwen2VLConfig& Engine::model_config() const {
  return impl_->lm->config();
}
const io::Tokenizer& Engine::tokenizer() const {
  return *impl_->tok;
}

void Engine::wait_idle() {
  std::unique_lock<std::mutex> lk(impl_->mu);
  impl_->idle_cv.wait(lk, [&] { return impl_->in_flight == 0; });
}

}  // namespace mmrt::engine
