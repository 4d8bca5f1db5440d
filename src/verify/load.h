// The open-loop HTTP load of `mmrt verify` and `mmrt bench --url`: streamed OpenAI chat requests
// sent to a server each at its scheduled time, whatever the others do, with latency counted from
// that scheduled time (no coordinated omission). Bodies are built ahead of time on their own
// thread, so building them never delays a send; how late each send still was is recorded.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mmrt::verify {

enum class Status { kOk, kRefused, kError, kTimeout };
const char* to_string(Status s);  // "ok", "refused", "error", "timeout"

// One request as the client saw it. Times on core/clock.h's now_ns() timeline.
struct Observed {
  Status status = Status::kError;
  int64_t scheduled_ns = 0, sent_ns = 0, done_ns = 0;
  std::vector<int64_t> chunk_ns;  // arrival of every content chunk (the first is the first token)
  long http_status = 0;
  std::string error, error_code;  // a refusal's or failure's message and code
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::string finish, text;
  nlohmann::json mmrt;  // the server's `mmrt` extension object of the last chunk (null if none)
};

struct LoadOptions {
  std::string base_url;    // http://HOST:PORT
  double timeout_s = 30;   // per request, from its send
  double lookahead_s = 3;  // bodies are built at most this far ahead of their send time
  size_t max_ahead = 256;  // ... and at most this many
  // Called about once a second with (seconds since start, sent, finished); may be empty.
  std::function<void(double, size_t, size_t)> progress;
};

// Sends request i (body body_of(i), called on the builder thread) at start_ns + times_s[i] *
// 1e9 (times ascending; start_ns 0: now). Returns the observations in the same order.
std::vector<Observed> run_open_loop(const std::vector<double>& times_s,
                                    const std::function<std::string(size_t)>& body_of,
                                    const LoadOptions& opts, int64_t start_ns = 0);

}  // namespace mmrt::verify
