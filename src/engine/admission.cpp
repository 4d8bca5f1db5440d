#include "engine/admission.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/engine.h"  // GenerateRequest (a quote promises its shells as submit() does)

namespace mmrt::engine {

Admission::Admission(const SlaConfig& sla, const CostModel& cost, bool reserve, bool safety)
    : sla_(sla), cost_(cost), reserve_(reserve), learn_safety_(safety) {}

double Admission::inflow_share(const Request& r, int64_t now) {
  while (!recent_.empty() && now - recent_.front().t_ns > kInflowWindowNs) recent_.pop_front();
  double tokens = 0, patches = 0, items = 0;
  for (const Admitted& a : recent_)
    if (a.weight > r.weight) {
      tokens += a.tokens;
      patches += a.patches;
      items += a.items;
    }
  if (tokens + patches <= 0 || first_admit_ns_ < 0) return 0;
  const double window_ns =
      std::max<double>(1e9, static_cast<double>(std::min(kInflowWindowNs, now - first_admit_ns_)));
  // Marginal cost: whole steps would count the running decoders' share once more.
  return std::max(0.0, cost_.predict_ns({tokens, 0, patches, 0, items}) - cost_.predict_ns({})) /
         window_ns;
}

namespace {

// Its media's expected preprocessing time while it is still being preprocessed.
double media_pending_ns(const Request& r) {
  return r.media_pending ? r.expected_media_ns : 0.0;
}

// The causal attention pairs of r's last `own` prompt tokens (own_tokens: they attend the
// prefix before them too). Takes the count rather than finding it again: own_tokens walks the
// prefix cache.
double prompt_pairs(const Request& r, double own) {
  const auto to = static_cast<double>(r.num_tokens());
  return causal_pairs(to - own, to);
}

const char* class_name(const Request& r) {
  return r.sla_class.empty() ? "requested" : r.sla_class.c_str();
}

}  // namespace

double Admission::work_ns(double own, const MediaWork& media, double queued,
                          const MediaWork& queued_media, const RunningLoad& load, int64_t budget,
                          double pairs) const {
  return cost_.predict_ttft_ns(own, media.patches, queued, queued_media.patches, load.n_decode,
                               load.context, budget, media.items, queued_media.items, pairs);
}

double Admission::step_guard_ns(const RunningLoad& load, int64_t budget,
                                bool others_prefill) const {
  const int64_t prefill = others_prefill ? std::max<int64_t>(0, budget - load.n_decode) : 0;
  return cost_.predict_ns(
      {static_cast<double>(prefill), static_cast<double>(load.n_decode), 0, load.context});
}

int64_t Admission::prompts_besides(const Request* r, const SchedulerView& v) {
  int64_t n = 0;
  for (const Request* q : v.running()) n += q != r && !q->prefilled();
  for (const Request* q : v.waiting()) n += q != r;
  return n;
}

Admission::MediaWork Admission::uncached_media(const Request& q, const SchedulerView& v) const {
  MediaWork w;
  for (const auto& m : q.media)
    if (m.begin + m.n_tokens > q.num_computed && !v.encoder_cached(m.key)) {
      w.patches += static_cast<double>(m.encoder_cost);
      w.items += 1;
    }
  return w;
}

// Prompt work still ahead of r's first token: its tokens past the cached prefix, or past what
// is computed.
double Admission::own_tokens(const Request& r, const SchedulerView& v) const {
  if (r.status == RequestStatus::kRunning)
    return static_cast<double>(r.num_tokens() - r.num_computed);
  return static_cast<double>(r.num_tokens() - v.cached_prefix_tokens(r));
}

double Admission::ttft_bias(double weight) const {
  auto it = bias_samples_.find(weight);
  if (it == bias_samples_.end() || it->second.size() < 8) return 1;
  // The least-squares slope of actual on modelled TTFT (through the origin): predictions near
  // the deadline, where admission decides, weigh the most. (The mean of log ratios it replaced
  // let a burst's first requests, modelled at 0.4 s and served at 3 s behind heavier classes
  // that overtook them in their slack, hold silver's bias at 3.7x for a minute.)
  double am = 0, mm = 0;
  for (const auto& [model, actual] : it->second) {
    am += actual * model;
    mm += model * model;
  }
  return mm > 0 ? std::clamp(am / mm, 0.25, 4.0) : 1.0;
}

double Admission::safety(double weight) const {
  auto it = safety_.find(weight);
  return it == safety_.end() ? 1.0 : it->second;
}

double Admission::safety_ns(const Request& q, double work, double own, const MediaWork& media,
                            double own_pairs, const RunningLoad& load, int64_t budget) const {
  const double s = safety(q.weight);
  if (s <= 1) return 0;  // off, or nothing learned: no second prediction
  const double alone = alone_ns(q, own, media, own_pairs, load, budget);
  return std::min(1e12, std::max(0.0, work - alone) * ttft_bias(q.weight) * (s - 1));
}

double Admission::alone_ns(const Request& q, double own, const MediaWork& media, double own_pairs,
                           const RunningLoad& load, int64_t budget) const {
  return media_pending_ns(q) + work_ns(own, media, 0, {}, load, budget, own_pairs);
}

void Admission::track_lateness(double weight, bool late) {
  if (!learn_safety_) return;
  double& s = safety_.try_emplace(weight, 1.0).first->second;
  s += late ? kSafetyStep : -kSafetyStep * kLateTarget / (1 - kLateTarget);
  s = std::clamp(s, 1.0, kMaxSafety);
}

void Admission::observe_first_token(const Request& r, int64_t first_token_ns) {
  learn(r, static_cast<double>(first_token_ns - r.arrival_ns));
  // Only a request admitted as on time teaches the safety (a class that accepts a miss admits
  // requests predicted late).
  if (r.deadline_ns > 0 && r.arrival_ns + r.predicted_ttft_ns <= r.deadline_ns)
    track_lateness(r.weight, first_token_ns > r.deadline_ns);
}

void Admission::learn(const Request& r, double actual) {
  if (r.model_ttft_ns <= 0 || actual <= 0) return;
  auto& samples = bias_samples_[r.weight];
  samples.push_back({static_cast<double>(r.model_ttft_ns), actual});
  if (samples.size() > kBiasWindow) samples.pop_front();
}

SlaConfig::MissAction Admission::on_miss(const Request& r, int64_t ttft_ns, bool tpot) const {
  if (r.own_deadline || (tpot && r.own_tpot)) return {OnMiss::kRefuse, -1};
  return sla_.on_miss(r.sla_class, ttft_ns);
}

void Admission::observe_step(const StepFeatures& f, double step_ns) {
  if (f.decode_tokens <= 0 || f.prefill_tokens > 0 || f.encoder_patches > 0 || step_ns <= 0) return;
  decode_steps_[static_cast<size_t>(n_decode_steps_ % kDecodeSteps)] = {f.decode_tokens, step_ns};
  ++n_decode_steps_;
}

double Admission::decode_step_ns(double n_decode) const {
  // Each recent decode-only step moved to n_decode rows by the fitted cost of a decoding
  // sequence (within [0, that step's share per row]: a fit that extrapolates badly moves it
  // little); their median, which one slow step (a first call's set-up, a neighbour on the host)
  // does not move.
  // Each moved step is non-decreasing in n_decode, and so is their median.
  const double fitted = cost_.coefficients_ns()[2];
  const auto n = static_cast<size_t>(std::min(n_decode_steps_, kDecodeSteps));
  if (n == 0) return 0;
  std::array<double, kDecodeSteps> at{};
  for (size_t i = 0; i < n; ++i) {
    const auto [rows, ns] = decode_steps_[i];
    const double marginal = std::clamp(fitted, 0.0, ns / std::max(1.0, rows));
    at[i] = std::max(0.0, ns + marginal * (n_decode - rows));
  }
  std::nth_element(at.begin(), at.begin() + static_cast<std::ptrdiff_t>(n / 2),
                   at.begin() + static_cast<std::ptrdiff_t>(n));
  return at[n / 2];
}

Admission::TpotMiss Admission::tpot_miss(const Request& r, const SchedulerView& v) const {
  TpotMiss m;
  if (n_decode_steps_ < kTpotObservations) return m;
  // Every running request decodes beside r (one still in its prompt soon will).
  const std::span<Request* const> running = v.running();
  const auto n = static_cast<double>(running.size());
  const double with = decode_step_ns(n + 1), without = decode_step_ns(n);
  if (r.tpot_target_ns > 0 && with > static_cast<double>(r.tpot_target_ns)) {
    m.step_ns = with;
    m.target_ns = r.tpot_target_ns;
  } else {
    for (const Request* q : running)
      if (q->tpot_target_ns > 0 && without <= static_cast<double>(q->tpot_target_ns) &&
          with > static_cast<double>(q->tpot_target_ns) &&
          (!m.victim || q->tpot_target_ns < m.target_ns)) {
        m.step_ns = with;
        m.target_ns = q->tpot_target_ns;
        m.victim = q;
      }
    if (!m.victim) return m;
  }
  // A retry helps once enough running requests have finished that the step fits (each decodes
  // its remaining tokens at about this step's time); never when r alone is over its target.
  const double target = static_cast<double>(m.target_ns);
  if (!m.victim && decode_step_ns(1) > target) return m;
  // Decoders that may stay: the most whose step with r keeps the target (the step grows with the
  // rows, so a bisection finds it).
  int64_t lo = 0, hi = static_cast<int64_t>(n);
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (decode_step_ns(static_cast<double>(mid) + 1) <= target)
      lo = mid;
    else
      hi = mid - 1;
  }
  const auto go = static_cast<size_t>(std::max<int64_t>(1, static_cast<int64_t>(n) - lo));
  if (go > running.size()) return m;
  std::vector<double> left;  // each running request's remaining decode time
  for (const Request* q : running)
    left.push_back(
        static_cast<double>(std::max<int64_t>(1, q->sampling.max_tokens - q->generated())) * with);
  std::nth_element(left.begin(), left.begin() + static_cast<std::ptrdiff_t>(go - 1), left.end());
  m.retry_after_ns = static_cast<int64_t>(left[go - 1]);
  return m;
}

void Admission::downgrade(Request& r, int to) {
  const SlaClass& lower = sla_.classes[static_cast<size_t>(to)];
  r.sla_class = lower.name;
  r.weight = lower.weight;
  r.deadline_ns = lower.ttft_ns ? r.arrival_ns + lower.ttft_ns : 0;
  // A TPOT of the request's own stays (tightened by the lower class's, should that be tighter).
  if (!r.own_tpot || (lower.tpot_ns > 0 && lower.tpot_ns < r.tpot_target_ns))
    r.tpot_target_ns = lower.tpot_ns;
  ++stats_.downgraded;
}

Admission::Prediction Admission::predict(Request& r, const SchedulerView& v, int64_t now) {
  // Work to do before r's first token: its own prompt past the cached prefix and its media not
  // in the encoder cache, plus the same for every request the policy serves first.
  Prediction p;
  p.own = own_tokens(r, v);
  p.own_pairs = p.pairs = prompt_pairs(r, p.own);
  p.own_media = uncached_media(r, v);
  MediaWork queued_media;
  const Policy& policy = v.policy();
  // The tightest TPOT target among them: each decodes (and shortens the steps) once its first
  // token is out, while r's prompt still waits or runs.
  int64_t ahead_tpot = 0;
  auto tighten = [](int64_t& t, const Request& q) {
    if (q.tpot_target_ns > 0 && (t == 0 || q.tpot_target_ns < t)) t = q.tpot_target_ns;
  };
  for (const Request* q : v.running()) {
    if (!q->prefilled() && policy.serves_first(*q, r, now)) {
      const auto own = static_cast<double>(q->num_tokens() - q->num_computed);
      p.queued += own;
      p.pairs += prompt_pairs(*q, own);
      queued_media += uncached_media(*q, v);
      tighten(ahead_tpot, *q);
    }
  }
  for (const Request* q : v.waiting()) {
    if (q == &r || !policy.serves_first(*q, r, now)) continue;
    const double own = own_tokens(*q, v);
    p.queued += own;
    p.pairs += prompt_pairs(*q, own);
    queued_media += uncached_media(*q, v);
    tighten(ahead_tpot, *q);
  }
  p.load = running_load(v.running());
  // The step budget as the batch controller set it, or as those targets will make it.
  p.budget = v.token_budget_with(ahead_tpot);
  int64_t with_r = ahead_tpot;
  tighten(with_r, r);
  p.budget_with_r = with_r != ahead_tpot ? v.token_budget_with(with_r) : p.budget;
  const double pred0 =
      work_ns(p.own, p.own_media, p.queued, queued_media, p.load, p.budget, p.pairs);
  // Media still to preprocess runs before any of that (on the media workers). Requests arriving
  // later that the policy serves first cannot take r's promise from it: admission refuses (or
  // downgrades) them when they would (displaced_by).
  // With the reservation, heavier classes arriving while r waits take a share rho of the
  // engine's time at their recent rate, so r waits pred0 / (1 - rho) (a priority queue's
  // waiting time); at rho >= 0.95 it never starts.
  p.rho = reserve_ ? inflow_share(r, now) : 0.0;
  const double pred = p.rho < 0.95 ? media_pending_ns(r) + pred0 / (1 - p.rho) : 1e12;
  const int64_t elapsed = now - r.arrival_ns;
  r.model_ttft_ns = elapsed + static_cast<int64_t>(pred);
  // The learned bias scales what is predicted, not the time already spent.
  r.predicted_ttft_ns = static_cast<int64_t>(
      std::min(1e12, static_cast<double>(elapsed) + pred * ttft_bias(r.weight)));
  // The decision keeps the margin expire_late keeps (one full step at the present load): a
  // request admitted without it was refused later by that check, after it had taken part of the
  // engine. The prediction itself stays the plain one (its error is tracked).
  p.guard_ns =
      static_cast<int64_t>(step_guard_ns(p.load, v.token_budget(), prompts_besides(&r, v) > 0));
  // The safety covers the queue's share of the prediction: the work of the requests served
  // before r, whose errors add up the longer it is (on its own, r's prompt is priced within a
  // step, and the step margin covers that).
  p.safety_ns =
      static_cast<int64_t>(safety_ns(r, pred, p.own, p.own_media, p.own_pairs, p.load, p.budget));
  return p;
}

std::string Admission::miss_reason(const Request& r, const Prediction& p) const {
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "predicted time to first token %.0f ms (+ %.0f ms margin) exceeds the %s class's %.0f ms "
      "(%.0f prompt tokens queued ahead)",
      static_cast<double>(r.predicted_ttft_ns) * 1e-6, static_cast<double>(p.margin_ns()) * 1e-6,
      class_name(r), static_cast<double>(r.deadline_ns - r.arrival_ns) * 1e-6, p.queued);
  std::string why = buf;
  if (p.rho > 0)
    why.insert(why.size() - 1, "; " + std::to_string(static_cast<int>(100 * std::min(p.rho, 1.0))) +
                                   "% of the engine reserved for heavier classes");
  return why;
}

bool Admission::precheck(Request& r, const SchedulerView& v, int64_t now, std::string& why) {
  if (r.deadline_ns == 0) return true;
  const Prediction p = predict(r, v, now);
  if (r.arrival_ns + r.predicted_ttft_ns + p.margin_ns() <= r.deadline_ns) return true;
  if (on_miss(r, r.predicted_ttft_ns + p.margin_ns()).action != OnMiss::kRefuse) return true;
  why = miss_reason(r, p) + " before its own prompt and media are counted";
  return false;
}

Quote Admission::quote(const SchedulerView& v, int64_t now) {
  Quote q;
  const RunningLoad load = running_load(v.running());
  const int64_t budget = v.token_budget();
  const double base = work_ns(0, {}, 0, {}, load, budget, 0);  // an empty step
  for (const SlaClass& c : sla_.classes) {
    if (c.ttft_ns <= 0) continue;
    GenerateRequest g;  // a request of the class arriving now, promised as any other
    g.sla_class = c.name;
    Request shell;
    start_clock(shell, now, now, now);
    apply_promise(shell, g, sla_);
    const Prediction p = predict(shell, v, now);
    // The safety scales the queue, which is all of a shell's prediction.
    const double bias = ttft_bias(c.weight), guard = static_cast<double>(p.guard_ns);
    const double ahead = static_cast<double>(shell.predicted_ttft_ns + p.margin_ns());
    q.classes.push_back({c.name, ahead * 1e-6, bias, std::min(ahead, base * bias + guard) * 1e-6,
                         longest_alone(c.ttft_ns, bias, budget)});
  }
  // A prompt token at a load: a full step's time over its prefill tokens. Idle: no decodes, as
  // "its own work alone" is judged (RunningLoad{}).
  const auto token_ns = [&](const RunningLoad& l) {
    const double cap = std::max<double>(1.0, static_cast<double>(budget - l.n_decode));
    return cost_.predict_ns({cap, static_cast<double>(l.n_decode), 0, l.context}) / cap;
  };
  q.token_ns = token_ns(load);
  q.token_idle_ns = token_ns(RunningLoad{});
  q.pair_ns = cost_.pair_ns();
  q.patch_ns = (work_ns(0, {1000, 0}, 0, {}, load, budget, 0) - base) / 1000;
  q.item_ns = work_ns(0, {0, 1}, 0, {}, load, budget, 0) - base;
  return q;
}

int64_t Admission::longest_alone(int64_t ttft_ns, double bias, int64_t budget) const {
  // As admit's "could it ever be met here": own work alone, idle, times the bias; monotone in n.
  const auto fits = [&](int64_t n) {
    const auto own = static_cast<double>(n);
    return work_ns(own, {}, 0, {}, RunningLoad{}, budget, causal_pairs(0, own)) * bias <=
           static_cast<double>(ttft_ns);
  };
  int64_t lo = 0, hi = Quote::kMaxQuotedPrompt;  // fits(lo) taken as true (no prompt: no work)
  if (fits(hi)) return hi;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

const Request* Admission::displaced_by(const Request& r, const Prediction& p,
                                       const SchedulerView& v, int64_t now,
                                       int64_t& late_by_ns) const {
  // Every prompt not yet prefilled (running its prefill, or waiting), r among them, in the
  // order the scheduler gives them step budget (the policy's order for prompts). Each one's
  // first token is predicted from the work ahead of it, with and without r's.
  std::vector<Request*> order;
  order.reserve(v.running().size() + v.waiting().size() + 1);
  for (Request* q : v.running())
    if (!q->prefilled()) order.push_back(q);
  for (Request* q : v.waiting())
    if (q != &r) order.push_back(q);
  order.push_back(const_cast<Request*>(&r));  // ordered, never written
  v.policy().order_waiting(order, now);
  if (order.back() == &r) return nullptr;  // served last: delays nobody
  double tokens = 0;  // the work ahead of the request at hand, r's included once past it
  double pairs = 0;   // ... its prompts' attention pairs
  MediaWork media;
  bool after_r = false;
  for (const Request* q : order) {
    const double own = q == &r ? p.own : own_tokens(*q, v);
    const double own_p = q == &r ? p.own_pairs : prompt_pairs(*q, own);
    const MediaWork w = q == &r ? p.own_media : uncached_media(*q, v);
    if (q == &r) {
      after_r = true;
    } else if (after_r && q->deadline_ns != 0 && q->generated() == 0) {
      // Its first token, from now, with the work ahead of it (as expire_late and admission
      // predict it: the work scaled by the class's bias, then the margin).
      auto first_token = [&](double ahead, double ahead_pairs, const MediaWork& ahead_media,
                             int64_t budget) {
        const double work = media_pending_ns(*q) + work_ns(own, w, ahead, ahead_media, p.load,
                                                           budget, own_p + ahead_pairs);
        return static_cast<double>(now) + work * ttft_bias(q->weight) +
               safety_ns(*q, work, own, w, own_p, p.load, budget) + static_cast<double>(p.guard_ns);
      };
      const double deadline = static_cast<double>(q->deadline_ns);
      const double with = first_token(tokens, pairs, media, p.budget_with_r);
      if (with > deadline &&
          first_token(tokens - p.own, pairs - p.own_pairs,
                      {media.patches - p.own_media.patches, media.items - p.own_media.items},
                      p.budget) <= deadline) {
        late_by_ns = static_cast<int64_t>(with - deadline);
        return q;
      }
    }
    tokens += own;
    pairs += own_p;
    media += w;
  }
  return nullptr;
}

bool Admission::admit(Request& r, const SchedulerView& v, int64_t now, std::string& why) {
  if (r.deadline_ns == 0) return true;
  // Once per class r may be moved down to (a downgrade decides again in the lower class).
  for (size_t attempt = 0; attempt <= sla_.classes.size(); ++attempt) {
    const Prediction p = predict(r, v, now);
    auto admitted = [&] {
      if (!reserve_) return true;
      if (first_admit_ns_ < 0) first_admit_ns_ = now;
      recent_.push_back({now, r.weight, p.own, p.own_media.patches, p.own_media.items});
      return true;
    };
    const bool fits = r.arrival_ns + r.predicted_ttft_ns + p.margin_ns() <= r.deadline_ns;
    int64_t late_by_ns = 0;
    const Request* victim = fits ? displaced_by(r, p, v, now, late_by_ns) : nullptr;
    const TpotMiss tpot = fits && !victim ? tpot_miss(r, v) : TpotMiss{};
    if (fits && !victim && tpot.step_ns == 0) return admitted();
    const SlaConfig::MissAction m =
        on_miss(r, r.predicted_ttft_ns + p.margin_ns(), tpot.step_ns > 0 && !tpot.victim);
    if (m.action == OnMiss::kAccept) return admitted();
    if (victim || tpot.victim) ++stats_.displacing;
    if (tpot.step_ns > 0) ++stats_.tpot_misses;
    if (m.action == OnMiss::kDowngrade) {
      downgrade(r, m.to);
      if (r.deadline_ns == 0) return admitted();
      continue;
    }
    ++stats_.refused;
    const int64_t budget_ns = r.deadline_ns - r.arrival_ns;
    if (tpot.step_ns > 0) {
      char buf[320];
      if (tpot.victim)
        std::snprintf(buf, sizeof buf,
                      "admitting it would make a %s request admitted before it late on its time "
                      "per output token: a decode step with it is predicted at %.0f ms, over "
                      "that request's %.0f ms",
                      tpot.victim->sla_class.empty() ? "classed" : tpot.victim->sla_class.c_str(),
                      tpot.step_ns * 1e-6, static_cast<double>(tpot.target_ns) * 1e-6);
      else
        std::snprintf(buf, sizeof buf,
                      "a token of it is predicted to take %.0f ms (a decode step of the %zu "
                      "running requests and it), over the %s%s %.0f ms per output token%s",
                      tpot.step_ns * 1e-6, v.running().size(), r.own_tpot ? "" : class_name(r),
                      r.own_tpot ? "request's own" : " class's",
                      static_cast<double>(tpot.target_ns) * 1e-6,
                      tpot.retry_after_ns < 0 ? ": this server cannot serve it in that class" : "");
      why = buf;
      r.retry_after_ns = tpot.retry_after_ns;
      return false;
    }
    if (victim) {
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "admitting it would make a %s request admitted before it late by %.0f ms "
                    "(its own first token is predicted at %.0f ms, within the %s class's %.0f "
                    "ms): the engine is full of promised work",
                    victim->sla_class.empty() ? "classed" : victim->sla_class.c_str(),
                    static_cast<double>(late_by_ns) * 1e-6,
                    static_cast<double>(r.predicted_ttft_ns) * 1e-6, class_name(r),
                    static_cast<double>(budget_ns) * 1e-6);
      why = buf;
      // When the request it would delay has had its first token, as predicted now.
      r.retry_after_ns = std::max<int64_t>(0, victim->deadline_ns - now);
      return false;
    }
    // Could it ever be met here? Its own work alone (no queue, no decoders), as predicted.
    const double own_only =
        alone_ns(r, p.own, p.own_media, p.own_pairs, RunningLoad{}, v.token_budget()) *
        ttft_bias(r.weight);
    r.retry_after_ns = own_only > static_cast<double>(budget_ns)
                           ? -1
                           : std::max<int64_t>(0, r.predicted_ttft_ns + p.safety_ns - budget_ns);
    if (r.retry_after_ns < 0) {
      char buf[240];
      std::snprintf(buf, sizeof buf,
                    "its own work alone (%.0f prompt tokens, %.0f encoder patches) is predicted "
                    "at %.0f ms, over the %s class's %.0f ms to first token: this server cannot "
                    "serve it in that class",
                    p.own, p.own_media.patches, own_only * 1e-6, class_name(r),
                    static_cast<double>(budget_ns) * 1e-6);
      why = buf;
    } else if (now >= r.deadline_ns) {  // nothing the engine does can help: say where time went
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "the %s class's %.0f ms to first token were spent before admission (%.0f ms "
                    "since the request's first byte arrived)",
                    class_name(r), static_cast<double>(budget_ns) * 1e-6,
                    static_cast<double>(now - r.arrival_ns) * 1e-6);
      why = buf;
    } else {
      why = miss_reason(r, p);
    }
    return false;
  }
  why = "no SLA class it could be moved to admits it";
  ++stats_.refused;
  return false;
}

std::vector<Admission::Refusal> Admission::expire_late(const SchedulerView& v, int64_t now,
                                                       int64_t since_ns) {
  struct Late {
    Request* r;
    int64_t ttft;  // predicted, from arrival
    // What the prediction is made of (the refusal says it): the time since arrival, its own
    // work left, the margin and the class's bias. elapsed + work is the least its first token
    // would take, from arrival (no margin, no bias).
    double elapsed_ns, work_ns, guard_ns, bias;
  };
  std::vector<Late> late;
  const RunningLoad load = running_load(v.running());
  const int64_t budget = v.token_budget();
  // The step in flight at the present load, the margin every check below adds: once scheduled,
  // a prompt shares steps with the running requests (served first), so a request found feasible
  // with nothing to spare got its first token a few ms late; it is refused (or downgraded) a step
  // earlier instead. A full step where other prompts are in progress, else a decode step.
  const double full_guard = step_guard_ns(load, budget, true);
  const double decode_guard = step_guard_ns(load, budget, false);
  const int64_t prompts = prompts_besides(nullptr, v);
  auto check = [&](Request* r) {
    // A request whose media is being preprocessed belongs to the media stage until it returns;
    // it is checked once it reaches the scheduler.
    if (r->deadline_ns == 0 || r->generated() > 0 || r->media_pending) return;
    if (r->status == RequestStatus::kRunning && r->prefilled()) return;
    const int64_t queued = r->timeline.last(Event::kQueued);
    if (queued > since_ns && queued < now) return;
    // As admission predicts (the same form, with the class's learned bias, and the guard), but
    // with no work ahead: a request admitted in this pass is never refused in the same one.
    // The bias scales the predicted work, not the margin (as admission adds it).
    const double guard = prompts > 1 ? full_guard : decode_guard;  // r's own prompt is one
    const double own = own_tokens(*r, v);
    const double work =
        work_ns(own, uncached_media(*r, v), 0, {}, load, budget, prompt_pairs(*r, own));
    const double elapsed = static_cast<double>(now - r->arrival_ns);
    const double bias = ttft_bias(r->weight);
    const double ttft = elapsed + work * bias + guard;
    if (static_cast<double>(r->arrival_ns) + ttft > static_cast<double>(r->deadline_ns))
      late.push_back({r, static_cast<int64_t>(ttft), elapsed, work, guard, bias});
  };
  for (Request* r : v.waiting()) check(r);
  for (Request* r : v.running()) check(r);
  std::vector<Refusal> refuse;
  for (const auto& [r, ttft, elapsed, work, guard, bias] : late) {
    const SlaConfig::MissAction m = on_miss(*r, ttft);
    if (m.action == OnMiss::kAccept) continue;
    // A request refused or moved down before its first token is the prediction admission got
    // most wrong: its class learns from it too, at the least its first token would have taken
    // (otherwise the bias learns only from the requests that made it, and stays optimistic).
    learn(*r, elapsed + work);
    track_lateness(r->weight, true);
    if (m.action == OnMiss::kDowngrade) {
      downgrade(*r, m.to);
      ++stats_.downgraded_late;
      continue;
    }
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%.0f ms after arrival its first token can no longer come within the %s "
                  "class's %.0f ms (its own work left, %.0f prompt tokens, is predicted at %.0f "
                  "ms x %.2f as this class's predictions have run, + %.0f ms margin)",
                  elapsed * 1e-6, class_name(*r),
                  static_cast<double>(r->deadline_ns - r->arrival_ns) * 1e-6, own_tokens(*r, v),
                  work * 1e-6, bias, guard * 1e-6);
    refuse.push_back({r, buf});
    r->retry_after_ns = std::max<int64_t>(0, ttft - (r->deadline_ns - r->arrival_ns));
    ++stats_.refused;
    ++stats_.refused_late;
    if (r->timeline.count(Event::kEncoderEnd) > 0) ++stats_.refused_after_encode;
  }
  return refuse;
}

}  // namespace mmrt::engine
