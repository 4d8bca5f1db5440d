// The engine's wiring and its step loop. The parts live in their own files: handles (handle.h),
// the media stage, admission, the scheduler and its managers, the executor.
#include "engine/engine.h"
#include "kernels/registry.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/admission.h"
#include "engine/tenant_ledger.h"
#include "io/tokenizer.h"
#include "models/registry.h"

namespace mmrt::engine {

struct Engine::Impl : SchedulerView {
  EngineConfig cfg;
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<media::HostContext> host;
  std::unique_ptr<io::Tokenizer> tok;
  models::Model model;
  std::unique_ptr<ModelExecutor> exec;
  std::unique_ptr<KvBlockManager> kv;
  std::unique_ptr<EncoderCache> enc;
  std::unique_ptr<Scheduler> sched;
  CostModel cost;
  std::unique_ptr<BatchController> bc;
  std::unique_ptr<Admission> admission;
  std::unique_ptr<EncoderPricing> pricing;  // the encoder's price: at load, and again when suspect
  std::unique_ptr<MediaStage> media;
  std::shared_ptr<CancelLink> link;

  // The books (the scheduler and its managers, the cost model, the batch controller, admission),
  // held by the step loop but while it waits for work or a step executes (the executor reads the
  // plain-data plan): a request is admitted or refused on the thread that prepared it, at once,
  // against the books as they are, and its media overlaps the step in flight. Before `mu`.
  std::mutex books_mu;
  std::vector<Request*> in_media;  // admitted, media being preprocessed
  mutable std::vector<Request*> waiting_view;
  int64_t media_skipped = 0, media_redecoded = 0;
  int64_t step_ns = 0, loop_busy_ns = 0;  // EngineStats' sums
  int64_t last_late_check = 0;            // when the step loop last ran admission's late check

  mutable std::mutex mu;  // guards everything below
  std::condition_variable cv, idle_cv;
  bool stopping = false;
  std::deque<Submission*> ready;  // preprocessed: for the scheduler
  bool added = false;             // a request reached the scheduler off the step loop (wakes it)
  std::vector<std::pair<Submission*, MediaStage::Failure>> failed;
  std::vector<RequestId> cancels;
  std::unordered_map<RequestId, std::unique_ptr<Submission>> entries;  // every one in flight
  RequestId next_id = 1;
  int64_t in_flight = 0;
  EngineStats stats;  // counters, and the books' snapshot the step loop publishes
  std::thread loop;

  // ---- SchedulerView (under books_mu) ----
  std::span<Request* const> running() const override { return sched->running(); }
  std::span<Request* const> waiting() const override {
    waiting_view.assign(sched->waiting().begin(), sched->waiting().end());
    waiting_view.insert(waiting_view.end(), in_media.begin(), in_media.end());
    return waiting_view;
  }
  int32_t token_budget() const override {
    return bc ? bc->planning_budget() : sched->token_budget();
  }
  int32_t token_budget_with(int64_t tpot_target_ns) const override {
    return bc ? bc->planning_budget_with(cost, sched->running(), tpot_target_ns) : token_budget();
  }
  const Policy& policy() const override { return sched->policy(); }
  int64_t cached_prefix_tokens(const Request& r) const override {
    return kv->cached_prefix_tokens(r);
  }
  bool encoder_cached(const Hash128& key) const override { return enc->contains(key); }

  TenantLedger tenants{"prompt tokens"};  // prompt tokens in flight per tenant (under books_mu)
  int64_t tenant_cap = 0;  // EngineConfig::tenant_max_prompt_tokens, resolved at load

  // ---- ending a request ----

  // Its result, final event and removal; the caller holds no lock but books_mu. Holding the
  // books (or the loop stopped) publishes them first: stats() read after it sees them.
  void complete(Submission& s, Outcome outcome, const std::string& reason,
                std::optional<ErrorCode> code = std::nullopt, bool with_books = true) {
    Request& r = *s.req;
    if (r.outcome == Outcome::kNone) {
      r.outcome = outcome;
      r.reason = reason;
      r.status = RequestStatus::kDone;
      r.timeline.add(Event::kFinished, now_ns(), static_cast<int64_t>(outcome));
    }
    if (code) r.error = *code;
    if ((r.outcome == Outcome::kFinished || r.outcome == Outcome::kStopped) && s.text)
      publish_text(s, s.text->finish());
    if (s.tenant_tokens) tenants.release(r.tenant, std::exchange(s.tenant_tokens, 0));
    RequestResult res = take_result(r);  // its logprobs were published above; r ends here
    if (with_books) snapshot();
    {
      // Counted before the handle is signalled: a caller reading stats() after its result sees it.
      std::lock_guard<std::mutex> lk(mu);
      ++stats.finished;
    }
    {
      std::lock_guard<std::mutex> lk(s.handle->mu);
      res.text = s.handle->result.text;
    }
    s.handle->finish(std::move(res));
    std::lock_guard<std::mutex> lk(mu);
    entries.erase(r.id);
    if (--in_flight == 0) idle_cv.notify_all();
  }
  // Ends `r` as refused or failed with an error code, whether or not the scheduler has it.
  void end(Request* r, Outcome o, ErrorCode code, const std::string& message) {
    const std::string reason = with_code(code, message);
    if (sched->contains(r)) sched->finish(r, o, now_ns(), reason);
    complete(*entry_of(r), o, reason, code);
  }

  Submission* entry_of(const Request* r) {
    std::lock_guard<std::mutex> lk(mu);
    return entries.at(r->id).get();
  }

  // ---- the media stage's results (its threads, or submit()'s for a short text request) ----
  void on_stage(Submission* s, MediaStage::Phase phase, std::optional<MediaStage::Failure> f) {
    if (!f && phase == MediaStage::Phase::kPrepare) {
      // Decided now, not after the step in flight: refusals are answered, media work starts.
      std::lock_guard<std::mutex> books(books_mu);
      admit_prepared(s, now_ns());
      return;
    }
    {
      std::lock_guard<std::mutex> lk(mu);
      if (f)
        failed.emplace_back(s, *f);
      else
        ready.push_back(s);
    }
    cv.notify_all();
  }

  // Ends `s` as cancelled if cancel() asked for it (under books_mu; the flag is read under mu).
  bool end_if_cancelled(Submission& s) {
    std::unique_lock<std::mutex> lk(mu);
    const bool cancelled = s.cancel_requested;
    lk.unlock();
    if (cancelled) complete(s, Outcome::kCancelled, "");
    return cancelled;
  }

  // A request the scheduler handed back (plan.need_media): the items whose decoding was skipped
  // go through the media stage after all; it queues again once they are preprocessed.
  void redecode(RequestId id) {
    std::unique_lock<std::mutex> lk(mu);
    auto it = entries.find(id);
    if (it == entries.end()) return;
    Submission* s = it->second.get();
    lk.unlock();
    Request& r = *s->req;
    sched->withdraw(&r);
    media_redecoded += media->unskip(*s);
    in_media.push_back(&r);
    media->submit(s, MediaStage::Phase::kPreprocess);
  }

  // A prepared request (under books_mu, which guards the scheduler's queues; the step in flight
  // reads only its plan): admitted to the scheduler, or to media preprocessing, or ended.
  void admit_prepared(Submission* s, int64_t now) {
    Request& r = *s->req;
    if (end_if_cancelled(*s)) return;
    // Media a cache serves is not decoded; admission then expects only the rest of the work.
    if (r.media_pending && cfg.skip_cached_media) media_skipped += media->skip_cached(*s, *this);
    std::string why;
    const int64_t cap = r.tenant_max_prompt_tokens ? r.tenant_max_prompt_tokens : tenant_cap;
    bool ok = !cfg.admission_control || admission->admit(r, *this, now, why);
    if (ok && !(ok = tenants.charge(r.tenant, r.num_tokens(), cap, why))) {
      r.over_tenant_cap = true;
      r.retry_after_ns = 1'000'000'000;
    }
    if (!ok) {
      const bool suspect = pricing->note_refusal(r);  // the encoder measured again when idle
      complete(*s, Outcome::kRefused, with_code(ErrorCode::kUnavailable, why),
               ErrorCode::kUnavailable);
      if (suspect) wake();
      return;
    }
    s->tenant_tokens = r.num_tokens();
    if (r.media_pending) {
      in_media.push_back(&r);
      media->submit(s, MediaStage::Phase::kPreprocess);
    } else {
      sched->add(&r, now);
      wake();
    }
  }

  void wake() {  // the step loop, from another thread
    {
      std::lock_guard<std::mutex> lk(mu);
      added = true;
    }
    cv.notify_all();
  }

  // ---- the step loop ----
  void step_loop() {
    for (;;) {
      try {
        if (!step_once()) return;
      } catch (const std::exception& err) {
        // Never let the loop die: fail whatever is scheduled and go on serving.
        std::fprintf(stderr, "mmrt engine: step failed: %s\n", err.what());
        std::lock_guard<std::mutex> books(books_mu);
        std::vector<Request*> all(sched->running().begin(), sched->running().end());
        for (Request* r : all) end(r, Outcome::kFailed, ErrorCode::kInternal, err.what());
      }
    }
  }

  void take_intake(int64_t now, std::vector<Submission*>& rdy) {
    for (Submission* s : rdy) {
      in_media.erase(std::remove(in_media.begin(), in_media.end(), s->req.get()), in_media.end());
      if (end_if_cancelled(*s)) continue;
      try {
        media->apply(*s);
      } catch (const Error& err) {  // the request's own (refused), or an internal error (failed)
        const bool ours = err.code() == ErrorCode::kInternal;
        complete(*s, ours ? Outcome::kFailed : Outcome::kRefused, with_code(err.code(), err.what()),
                 err.code());
        continue;
      } catch (const std::exception& err) {  // e.g. bad_alloc: this request only
        complete(*s, Outcome::kFailed, with_code(ErrorCode::kInternal, err.what()),
                 ErrorCode::kInternal);
        continue;
      }
      sched->add(s->req.get(), now);
    }
  }

  void take_cancels(const std::vector<RequestId>& ids) {
    for (RequestId id : ids) {
      Submission* s = nullptr;
      {
        std::lock_guard<std::mutex> lk(mu);
        auto it = entries.find(id);
        if (it == entries.end()) continue;
        s = it->second.get();
        s->cancel_requested = true;  // in the media stage: dropped when it comes out
      }
      if (sched->contains(s->req.get())) {
        sched->finish(s->req.get(), Outcome::kCancelled, now_ns());
        complete(*s, Outcome::kCancelled, "");
      }
    }
  }

  // The encoder's cost measured again, the step loop idle (`books` released meanwhile).
  void remeasure_encoder(std::unique_lock<std::mutex>& books) {
    books.unlock();
    const EncoderCalibration k = pricing->measure();
    books.lock();
    if (!pricing->apply(k, cost, now_ns())) return;
    std::lock_guard<std::mutex> lk(mu);
    stats.encoder_calibration = k;
    ++stats.encoder_remeasured;
  }

  // One iteration of the step loop; false when the engine stops.
  bool step_once() {
    std::vector<Submission*> rdy;
    std::vector<RequestId> new_cancels;
    std::vector<std::pair<Submission*, MediaStage::Failure>> fails;
    bool idle = false;  // read under books_mu: other threads add to the scheduler under it
    {
      std::lock_guard<std::mutex> books(books_mu);
      idle = sched->idle();
      // Idle: the next arrival is planned at the idle budget, not the last (maybe paced) step's.
      if (idle && bc) bc->plan_step(cost, {}, now_ns(), 0, 0);
    }
    {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] {
        return stopping || !ready.empty() || added || !cancels.empty() || !failed.empty() || !idle;
      });
      if (stopping) return false;
      added = false;
      rdy.assign(ready.begin(), ready.end());
      ready.clear();
      new_cancels.swap(cancels);
      fails.swap(failed);
    }
    std::unique_lock<std::mutex> books(books_mu);
    const int64_t began = now_ns();
    for (auto& [s, f] : fails) {
      in_media.erase(std::remove(in_media.begin(), in_media.end(), s->req.get()), in_media.end());
      s->req->failed_media = f.media_item;
      complete(*s, f.outcome, with_code(f.code, f.message), f.code);
    }
    const int64_t now = now_ns();
    take_intake(now, rdy);
    take_cancels(new_cancels);
    if (cfg.admission_control)
      for (const auto& late : admission->expire_late(*this, now, last_late_check))
        end(late.r, Outcome::kRefused, ErrorCode::kUnavailable, late.reason);
    last_late_check = now;
    if (sched->idle()) {
      if (in_media.empty() && pricing->due(now)) remeasure_encoder(books);
      snapshot();
      return true;
    }
    if (bc) {  // the step's budget from the running requests' TPOT schedules
      const RunningLoad l = running_load(sched->running());
      sched->set_token_budget(
          bc->plan_step(cost, sched->running(), now_ns(), l.n_decode, l.context));
      if (cfg.encoder_parts)  // a step with a time goal charges its encoder work to it
        sched->set_encoder_pacing(bc->encoder_pacing(cost, l.n_decode, l.context));
    }
    StepPlan plan = sched->schedule(now_ns());
    for (RequestId id : plan.need_media) redecode(id);
    if (plan.empty()) {
      // Nothing fits with the running set empty (none left for its media): the head never runs.
      if (plan.need_media.empty() && sched->num_running() == 0 && sched->num_waiting() > 0)
        end(sched->waiting().front(), Outcome::kFailed, ErrorCode::kResourceExhausted,
            "not enough KV cache for the prompt");
      snapshot();
      return true;
    }
    StepOutput out;
    books.unlock();  // the step reads only the plan: admission may run meanwhile
    try {
      out = exec->execute(plan);
    } catch (const std::exception& err) {
      // A failed step fails the requests in it; everyone else goes on.
      books.lock();
      for (Request* r : sched->abort(plan))
        end(r, Outcome::kFailed, ErrorCode::kInternal, err.what());
      snapshot();
      return true;
    }
    books.lock();
    const StepFeatures f = step_features(plan);
    cost.observe(f, static_cast<double>(out.step_ns), encoder_ns(out));
    admission->observe_step(f, static_cast<double>(out.step_ns));
    if (bc) bc->observe(static_cast<double>(out.step_ns), bc->goal_ns(), f);
    const std::vector<Request*> changed = sched->update(plan, out, now_ns());
    for (Request* r : changed) after_token(*r);
    step_ns += out.step_ns;
    loop_busy_ns += now_ns() - began;
    snapshot(1);
    return true;
  }

  // A request got a token or finished in the last step: learning, text, stop strings, the end.
  void after_token(Request& r) {
    Submission& s = *entry_of(&r);
    if (r.predicted_ttft_ns > 0 && r.timeline.count(Event::kToken) == 0 && r.generated() <= 1) {
      const int64_t first = r.timeline.first(Event::kFirstToken);
      admission->observe_first_token(r, first);
      cost.record_ttft(static_cast<double>(r.predicted_ttft_ns),
                       static_cast<double>(first - r.arrival_ns));
    }
    try {
      if (!r.finished()) {
        publish_text(s, s.text->push(r.output.back()));
        if (s.text->stopped()) sched->finish(&r, Outcome::kStopped, now_ns());
      } else if (r.outcome == Outcome::kFinished && !r.output.empty()) {
        publish_text(s, s.text->push(r.output.back()));
        if (s.text->stopped()) r.outcome = Outcome::kStopped;
      }
    } catch (const std::exception& err) {
      sched->finish(&r, Outcome::kFailed, now_ns(), with_code(ErrorCode::kInternal, err.what()));
      r.error = ErrorCode::kInternal;
    }
    if (r.finished()) complete(s, r.outcome, r.reason);
  }

  // Publishes the books for stats() (the step loop is their only writer).
  void snapshot(int64_t steps = 0) {
    std::lock_guard<std::mutex> lk(mu);
    EngineStats& s = stats;
    s.steps += steps;
    s.step_ns = step_ns;
    s.loop_busy_ns = loop_busy_ns;
    s.preemptions = sched->total_preemptions();
    s.prefix_query_tokens = kv->stats().prefix_query_tokens;
    s.prefix_hit_tokens = kv->stats().prefix_hit_tokens;
    s.encoder_hits = enc->stats().hits;
    s.encoder_misses = enc->stats().misses;
    s.encoder_runs = sched->encoder_runs();
    s.encoder_split_steps = sched->encoder_split_steps();
    s.media_skipped = media_skipped;
    s.media_redecoded = media_redecoded;
    s.transfers = backend->transfers();
    s.step_graph_steps = exec->step_graph_stats();
    s.kv_blocks_used = kv->num_used_blocks();
    s.waiting = sched->num_waiting() + in_media.size();
    s.in_media = in_media.size();
    s.running = sched->num_running();
    s.token_budget = sched->token_budget();
    static_cast<AdmissionStats&>(s) = admission->stats();
    s.ttft_prediction = cost.ttft_error();
    s.cost_coefficients_ns = cost.coefficients_ns();
    s.media_sandbox = media->sandbox_stats();
    s.remote_encode = media->remote_stats();
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Engine> Engine::create(const EngineConfig& cfg) {
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.cfg = cfg;
  m.backend = cfg.make_backend(cfg.device, cfg.backend);
  m.host = std::make_unique<media::HostContext>(cfg.host);
  const models::ModelFamily& family = models::family_for_checkpoint(cfg.model_dir);
  m.tok = std::make_unique<io::Tokenizer>(models::load_tokenizer(cfg.model_dir));
  m.model = models::load_model(family, *m.backend, cfg.model_dir, cfg.model);
  const models::ModelSpec& spec = m.model.spec;
  models::check_tokenizer(*m.tok, spec.vocab_size, cfg.model_dir);
  m.exec = std::make_unique<ModelExecutor>(*m.backend, *m.model.runner, spec.embed_dim, cfg.kv);
  const kernels::KvCacheConfig& kvc = m.exec->kv_config();
  m.kv = std::make_unique<KvBlockManager>(kvc.num_blocks, kvc.block_size, cfg.prefix_caching,
                                          cfg.on_kv_cache);
  m.tenant_cap = cfg.tenant_max_prompt_tokens >= 0
                     ? cfg.tenant_max_prompt_tokens
                     : static_cast<int64_t>(kvc.num_blocks) * kvc.block_size / 2;
  m.enc = std::make_unique<EncoderCache>(cfg.encoder_cache_bytes, cfg.on_media_cache);
  SchedulerConfig sc = cfg.scheduler;
  sc.position_rows = spec.position_rows;
  sc.encoder_row_bytes = static_cast<uint64_t>(spec.embed_dim) * 2;  // stored as f16
  models::Runner* runner = m.model.runner.get();
  sc.encode_parts = [runner](const models::PreparedMedia& p) { return runner->encode_parts(p); };
  m.sched = std::make_unique<Scheduler>(
      sc, *m.kv, *m.enc,
      make_policy(cfg.policy, {&m.cost, cfg.sla.max_starvation_ns, cfg.scheduler.token_budget}));
  if (cfg.batch_controller) {
    BatchControllerConfig b = cfg.batch;
    b.max_budget = cfg.scheduler.token_budget;
    m.bc = std::make_unique<BatchController>(b);
  }
  m.admission =
      std::make_unique<Admission>(m.cfg.sla, m.cost, cfg.admission_reserve, cfg.admission_safety);
  m.pricing = std::make_unique<EncoderPricing>(
      *m.backend, m.model, m.host->media_context(),
      EncoderPricing::Options{cfg.encoder_ns_per_unit, cfg.calibrate_encoder,
                              cfg.encoder_remeasure_ns});
  m.stats.encoder_calibration = m.pricing->at_load(m.cost, now_ns());
  m.stats.step_graphs =
      m.exec->capture_step_graphs({cfg.step_graphs.max_rows, cfg.step_graphs.max_context,
                                   cfg.scheduler.token_budget, cfg.scheduler.max_running});
  MediaStageConfig mc;
  mc.media_threads = std::max(1, cfg.media_threads);
  mc.kv_capacity_tokens = static_cast<int64_t>(kvc.num_blocks) * kvc.block_size;
  // Each media worker preprocesses one item on its own thread (no pool), so media work never
  // waits on model steps; buffers come from the host context's cache.
  mc.media = m.host->media_context();
  mc.sandbox = cfg.media_sandbox;
  mc.sandbox.model_dir = cfg.model_dir;
  mc.sandbox.isa = m.host->isa();
  mc.remote = cfg.remote_encoder;
  Impl* raw = impl.get();
  m.media = std::make_unique<MediaStage>(
      spec, *m.model.processor, *m.tok, mc,
      [raw](Submission* s, MediaStage::Phase p, std::optional<MediaStage::Failure> f) {
        raw->on_stage(s, p, std::move(f));
      });
  m.link = std::make_shared<CancelLink>([raw](RequestId id) {
    {
      std::lock_guard<std::mutex> lk(raw->mu);
      raw->cancels.push_back(id);
    }
    raw->cv.notify_all();
  });
  m.stats.kv_blocks_total = kvc.num_blocks;
  m.stats.kv_block_size = kvc.block_size;
  m.snapshot();
  raw->loop = std::thread([raw] {
    set_thread_nice(raw->cfg.backend.nice);  // it computes too (the pool's calling thread)
    raw->step_loop();
  });
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::~Engine() {
  Impl& m = *impl_;
  m.link->detach();  // handles that outlive the engine: cancel() does nothing
  {
    std::lock_guard<std::mutex> lk(m.mu);
    m.stopping = true;
  }
  m.cv.notify_all();
  if (m.loop.joinable()) m.loop.join();
  m.media->stop();  // joins the media threads (queued work is dropped)
  // Whatever is still in flight ends as cancelled.
  std::vector<Submission*> left;
  for (auto& [id, e] : m.entries) left.push_back(e.get());
  for (Submission* s : left) m.complete(*s, Outcome::kCancelled, "engine shut down");
}

RequestHandle Engine::submit(GenerateRequest g) {
  Impl& m = *impl_;
  auto sub = std::make_unique<Submission>();
  auto state = std::make_shared<RequestHandle::State>();
  sub->req = std::make_unique<Request>();
  Request& r = *sub->req;
  {
    std::lock_guard<std::mutex> lk(m.mu);
    r.id = m.next_id++;
    ++m.stats.submitted;
    ++m.in_flight;
  }
  state->id = r.id;
  state->link = m.link;
  start_clock(r, g.arrival_ns, g.read_ns, now_ns());
  r.tenant = g.tenant;
  r.tenant_salt = tenant_salt(g.tenant);
  r.tenant_max_prompt_tokens = g.tenant_max_prompt_tokens;
  r.sampling = g.sampling;
  r.stop_ids = m.model.spec.stop_ids;
  sub->handle = state;
  Submission* s = sub.get();
  {
    std::lock_guard<std::mutex> lk(m.mu);
    m.entries.emplace(r.id, std::move(sub));
  }
  try {
    apply_promise(r, g, m.cfg.sla);
    r.sampling.validate();
    s->text = std::make_unique<OutputText>(*m.tok, r.sampling.stop);
    r.resume(std::move(g.resume_ids), m.model.spec.vocab_size);
    s->text->prime(r.output);
    s->ids_sent = r.output.size();
    s->messages = std::move(g.messages);
    s->prompt_ids = std::move(g.prompt_ids);
    s->prompt_text = std::move(g.prompt_text);
    s->media = std::move(g.media);
  } catch (const Error& err) {
    m.complete(*s, Outcome::kRefused, with_code(err.code(), err.what()), err.code(),
               /*with_books=*/false);
    return RequestHandle(state);
  }
  m.media->prepare(s, m.cfg.prepare_inline_bytes);
  return RequestHandle(state);
}

std::string Engine::precheck(const GenerateRequest& g) {
  Impl& m = *impl_;
  if (!m.cfg.admission_control) return "";
  Request shell;
  const int64_t now = now_ns();
  start_clock(shell, g.arrival_ns, g.read_ns, now);
  shell.tenant = g.tenant;
  try {
    apply_promise(shell, g, m.cfg.sla);
  } catch (const Error&) {
    return "";  // submit() answers for a bad class
  }
  std::string why;
  std::lock_guard<std::mutex> books(m.books_mu);
  return m.admission->precheck(shell, m, now, why) ? "" : why;
}

Quote Engine::quote() const {
  std::lock_guard<std::mutex> books(impl_->books_mu);
  return impl_->admission->quote(*impl_, now_ns());
}
void Engine::cancel(RequestId id) {
  impl_->link->cancel(id);
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->stats;
}

const models::ModelSpec& Engine::model_spec() const {
  return impl_->model.spec;
}
const io::Tokenizer& Engine::tokenizer() const {
  return *impl_->tok;
}
const kernels::Backend& Engine::backend() const {
  return *impl_->backend;
}

void Engine::wait_idle() {
  std::unique_lock<std::mutex> lk(impl_->mu);
  impl_->idle_cv.wait(lk, [&] { return impl_->in_flight == 0; });
}

}  // namespace mmrt::engine
