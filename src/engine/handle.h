// Request handles: how a caller follows one request. The engine pushes events (text as it
// becomes complete, then exactly one kDone carrying the outcome and, for refusals and failures,
// an ErrorCode a server maps to an HTTP status); the caller pulls them (blocking next(), or
// try_next()) or is told when there is something to pull (set_notify: for an event loop). A
// handle may outlive the engine: cancel() then does nothing.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/request.h"
#include "engine/timeline.h"

namespace mmrt::engine {

struct StreamEvent {
  enum class Kind { kText, kDone } kind = Kind::kText;
  std::string text;  // kText: newly complete text (empty once: a first token without text yet)
  // kText, when the request asked for log-probabilities: the tokens that completed since the
  // previous event (tokens whose text is held back come with a later event, or only in the
  // result).
  std::vector<TokenLogprobs> logprobs;
  Outcome outcome = Outcome::kNone;  // kDone
  std::optional<ErrorCode> error;    // kDone of a refused or failed request
  std::string reason;                // kDone: why it was refused / failed
  // After the one real kDone, next() keeps answering kDone with replay = true: a second real
  // kDone in a stream is a bug callers (and tests) can see.
  bool replay = false;
};

struct RequestResult {
  RequestId id = 0;
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;  // one per token when asked for
  Outcome outcome = Outcome::kNone;
  std::optional<ErrorCode> error;  // set for kRefused and kFailed
  std::string reason;
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0;
  int32_t preemptions = 0;
  std::string sla_class;          // the class it was served in (after any downgrade)
  int64_t predicted_ttft_ns = 0;  // admission's prediction (0: none)
  int64_t retry_after_ns = 0;     // refused by admission: see Request::retry_after_ns (-1: never)
  bool over_tenant_cap = false;   // refused: its tenant's prompt tokens in flight were at the cap
  int64_t deadline_ns = 0, tpot_target_ns = 0;  // absolute TTFT deadline, TPOT target
  // Of its media time: decoding the files and resampling audio (sums over its items).
  int64_t media_decode_ns = 0, media_resample_ns = 0;
  Timeline timeline;
};

// The result of a request that has ended (its log-probabilities moved out; no text).
RequestResult take_result(Request& r);

// The engine side of a handle's cancel(): cleared when the engine goes away.
class CancelLink {
 public:
  explicit CancelLink(std::function<void(RequestId)> cancel) : cancel_(std::move(cancel)) {}
  void cancel(RequestId id);
  void detach();  // the engine is shutting down: later cancels do nothing

 private:
  std::mutex mu_;
  std::function<void(RequestId)> cancel_;
};

class RequestHandle {
 public:
  struct State;
  explicit RequestHandle(std::shared_ptr<State> s) : s_(std::move(s)) {}

  RequestId id() const;
  // Next event; nullopt on timeout (timeout_ms < 0 waits forever).
  std::optional<StreamEvent> next(int64_t timeout_ms = -1);
  std::optional<StreamEvent> try_next() { return next(0); }
  // Every event waiting now, in order, taken under one lock without blocking (empty when none):
  // what an event loop's drain wants, so that it never chases a producer adding events as fast
  // as it takes them. After the real kDone nothing more comes (no replay).
  std::deque<StreamEvent> take_events();
  // Waits for the end and returns everything (text, tokens, outcome, timeline).
  RequestResult wait();
  bool done() const;
  // Asks the engine to end the request (kCancelled unless it ends otherwise first).
  void cancel();
  // `fn` is called (on an engine thread) whenever an event arrives, and at once if events are
  // already waiting. It must return quickly and must not call back into this handle's next()
  // or wait() while holding locks of its own that the caller of next() holds.
  void set_notify(std::function<void()> fn);

 private:
  std::shared_ptr<State> s_;
};

// What the engine holds of a handle.
struct RequestHandle::State {
  RequestId id = 0;
  std::shared_ptr<CancelLink> link;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<StreamEvent> events;
  bool done = false;
  RequestResult result;
  std::function<void()> notify;

  void push_text(const std::string& text, std::vector<TokenLogprobs> logprobs = {});
  // The one kDone: stores the result and signals.
  void finish(RequestResult r);
};

}  // namespace mmrt::engine
