#include "engine/handle.h"

#include <chrono>

namespace mmrt::engine {

RequestResult take_result(Request& r) {
  RequestResult res;
  res.id = r.id;
  res.tokens.assign(r.output.begin() + r.resumed, r.output.end());  // generated here
  res.logprobs = std::move(r.output_logprobs);
  res.outcome = r.outcome;
  if (r.outcome == Outcome::kRefused || r.outcome == Outcome::kFailed) res.error = r.error;
  res.reason = r.reason;
  res.prompt_tokens = static_cast<int64_t>(r.prompt.size());
  res.cached_prompt_tokens = r.num_cached_hit;
  res.preemptions = r.num_preemptions;
  res.sla_class = r.sla_class;
  res.predicted_ttft_ns = r.predicted_ttft_ns;
  res.retry_after_ns = r.retry_after_ns;
  res.over_tenant_cap = r.over_tenant_cap;
  res.deadline_ns = r.deadline_ns;
  res.tpot_target_ns = r.tpot_target_ns;
  res.media_decode_ns = r.media_decode_ns;
  res.media_resample_ns = r.media_resample_ns;
  res.failed_media = r.failed_media;
  res.timeline = r.timeline;
  return res;
}

void CancelLink::cancel(RequestId id) {
  std::lock_guard<std::mutex> lk(mu_);
  if (cancel_) cancel_(id);
}

void CancelLink::detach() {
  std::lock_guard<std::mutex> lk(mu_);
  cancel_ = nullptr;
}

void RequestHandle::State::push_text(const std::string& text, std::vector<TokenLogprobs> logprobs,
                                     std::vector<int32_t> token_ids) {
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lk(mu);
    StreamEvent e;
    e.text = text;
    e.logprobs = std::move(logprobs);
    e.token_ids = std::move(token_ids);
    events.push_back(std::move(e));
    fn = notify;
  }
  cv.notify_all();
  if (fn) fn();
}

void RequestHandle::State::finish(RequestResult r) {
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lk(mu);
    StreamEvent e;
    e.kind = StreamEvent::Kind::kDone;
    e.outcome = r.outcome;
    e.error = r.error;
    e.reason = r.reason;
    events.push_back(std::move(e));
    result = std::move(r);
    done = true;
    fn = notify;
  }
  cv.notify_all();
  if (fn) fn();
}

RequestId RequestHandle::id() const {
  return s_->id;
}

std::optional<StreamEvent> RequestHandle::next(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lk(s_->mu);
  auto ready = [&] { return !s_->events.empty() || s_->done; };
  if (timeout_ms < 0)
    s_->cv.wait(lk, ready);
  else if (timeout_ms == 0 ? !ready()  // no timed wait: that is a system call even at 0
                           : !s_->cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), ready))
    return std::nullopt;
  if (!s_->events.empty()) {
    StreamEvent e = std::move(s_->events.front());
    s_->events.pop_front();
    return e;
  }
  StreamEvent e;
  e.kind = StreamEvent::Kind::kDone;
  e.outcome = s_->result.outcome;
  e.error = s_->result.error;
  e.reason = s_->result.reason;
  e.replay = true;
  return e;
}

std::deque<StreamEvent> RequestHandle::take_events() {
  std::deque<StreamEvent> out;
  std::lock_guard<std::mutex> lk(s_->mu);
  out.swap(s_->events);  // constant time under the lock the engine's step loop pushes through
  return out;
}

RequestResult RequestHandle::wait() {
  std::unique_lock<std::mutex> lk(s_->mu);
  s_->cv.wait(lk, [&] { return s_->done; });
  return s_->result;
}

bool RequestHandle::done() const {
  std::lock_guard<std::mutex> lk(s_->mu);
  return s_->done;
}

void RequestHandle::cancel() {
  if (s_->link) s_->link->cancel(s_->id);
}

void RequestHandle::set_notify(std::function<void()> fn) {
  bool pending;
  {
    std::lock_guard<std::mutex> lk(s_->mu);
    s_->notify = fn;
    pending = !s_->events.empty();
  }
  if (pending && fn) fn();
}

}  // namespace mmrt::engine
