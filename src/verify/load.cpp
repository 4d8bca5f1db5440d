#include "verify/load.h"

#include <curl/curl.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "core/clock.h"
#include "core/error.h"

namespace mmrt::verify {
namespace {

using nlohmann::json;

constexpr size_t kMaxPendingBytes = 16u << 20;  // of one unfinished SSE event or error body

// A non-negative integer field of a server object, 0 when absent or of another type (a
// misbehaving server must not take the client down).
int64_t int_field(const json& o, const char* k) {
  if (!o.is_object()) return 0;
  auto it = o.find(k);
  return it != o.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}
std::string str_field(const json& o, const char* k, const std::string& def) {
  if (!o.is_object()) return def;
  auto it = o.find(k);
  return it != o.end() && it->is_string() ? it->get<std::string>() : def;
}

struct Transfer {
  size_t index = 0;
  std::string body, buf, error_body;
  curl_slist* headers = nullptr;
  CURL* easy = nullptr;
  Observed* o = nullptr;
  bool done_seen = false;

  void on_event(const std::string& data) {
    if (data == "[DONE]") {
      done_seen = true;
      return;
    }
    // Content chunks are told apart without parsing them (the client must stay cheaper than
    // the server it measures); the others (finish, usage, errors) are parsed.
    static const std::string kContent = "\"delta\":{\"content\":\"";
    const size_t at = data.find(kContent);
    if (at != std::string::npos && data.find("\"finish_reason\":null") != std::string::npos) {
      if (data.compare(at + kContent.size(), 1, "\"") == 0) return;  // the role's empty delta
      o->chunk_ns.push_back(now_ns());
      return;
    }
    json d = json::parse(data, nullptr, false);
    if (d.is_discarded()) return;
    if (!d.is_object()) return;
    if (d.contains("error") && d["error"].is_object()) {
      o->error = str_field(d["error"], "message", "error");
      o->error_code = str_field(d["error"], "code", "");
      return;
    }
    if (d.contains("usage") && d["usage"].is_object()) {
      const json& u = d["usage"];
      o->prompt_tokens = int_field(u, "prompt_tokens");
      o->completion_tokens = int_field(u, "completion_tokens");
      if (u.contains("prompt_tokens_details"))
        o->cached_tokens = int_field(u["prompt_tokens_details"], "cached_tokens");
    }
    if (d.contains("mmrt") && d["mmrt"].is_object()) o->mmrt = d["mmrt"];
    if (!d.contains("choices") || !d["choices"].is_array() || d["choices"].empty()) return;
    const json& c = d["choices"][0];
    if (!c.is_object()) return;
    if (c.contains("finish_reason") && c["finish_reason"].is_string())
      o->finish = c["finish_reason"].get<std::string>();
    if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
        c["delta"]["content"].is_string() && !c["delta"]["content"].get<std::string>().empty()) {
      o->chunk_ns.push_back(now_ns());
      o->text += c["delta"]["content"].get<std::string>();
    }
  }
};

// libcurl's write callback: nothing may throw through its C frames; a failure ends this transfer
// (returning less than given makes curl abort it with a write error).
size_t on_data(char* p, size_t size, size_t n, void* user) try {
  auto* t = static_cast<Transfer*>(user);
  if (t->buf.size() + size * n > kMaxPendingBytes) return 0;  // no event end in sight
  t->buf.append(p, size * n);
  size_t at;
  while ((at = t->buf.find("\n\n")) != std::string::npos) {
    const std::string ev = t->buf.substr(0, at);
    t->buf.erase(0, at + 2);
    if (ev.rfind("data: ", 0) == 0)
      t->on_event(ev.substr(6));
    else if (ev.rfind("{", 0) == 0)
      t->error_body += ev;  // a plain JSON error response
  }
  if (t->buf.size() > 1 && t->buf[0] == '{') {  // an error body without blank lines
    if (t->error_body.size() < kMaxPendingBytes) t->error_body += t->buf;
    t->buf.clear();
  }
  return size * n;
} catch (...) {
  return 0;
}

// The error object of a plain JSON error response: message and code.
void read_error_body(const std::string& body, Observed& o) {
  json d = json::parse(body, nullptr, false);
  if (!d.is_discarded() && d.is_object() && d.contains("error") && d["error"].is_object()) {
    o.error = str_field(d["error"], "message", body.substr(0, 500));
    o.error_code = str_field(d["error"], "code", "");
  } else if (o.error.empty()) {
    o.error = body.substr(0, 500);
  }
}

// Builds bodies in schedule order on its own thread, at most lookahead seconds / max_ahead
// requests ahead of the sender.
class BodyBuilder {
 public:
  BodyBuilder(const std::vector<double>& times, const std::function<std::string(size_t)>& body_of,
              const LoadOptions& opts, int64_t start_ns)
      : times_(times), body_of_(body_of), opts_(opts), start_ns_(start_ns), thread_([this] {
          loop();
        }) {}
  ~BodyBuilder() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // Body i (blocks until built; i in order).
  std::string take(size_t i) {
    std::unique_lock<std::mutex> l(mu_);
    taken_ = i + 1;
    cv_.notify_all();
    cv_.wait(l, [&] { return error_ || (!ready_.empty() && ready_.front().first == i); });
    if (error_ && (ready_.empty() || ready_.front().first != i)) std::rethrow_exception(error_);
    std::string b = std::move(ready_.front().second);
    ready_.pop_front();
    cv_.notify_all();
    return b;
  }

 private:
  void loop() {
    for (size_t i = 0; i < times_.size(); ++i) {
      {
        std::unique_lock<std::mutex> l(mu_);
        // Wait until i is within the look-ahead window or the sender wants it.
        while (!stop_ && i >= taken_) {
          const int64_t due = start_ns_ + static_cast<int64_t>(times_[i] * 1e9);
          const bool near = due - now_ns() < static_cast<int64_t>(opts_.lookahead_s * 1e9);
          if (near && ready_.size() < opts_.max_ahead) break;
          cv_.wait_for(l, std::chrono::milliseconds(20));
        }
        if (stop_) return;
      }
      std::string b;
      try {
        b = body_of_(i);
      } catch (...) {  // handed to the sender, which stops the run with it
        std::lock_guard<std::mutex> l(mu_);
        error_ = std::current_exception();
        cv_.notify_all();
        return;
      }
      std::lock_guard<std::mutex> l(mu_);
      ready_.emplace_back(i, std::move(b));
      cv_.notify_all();
    }
  }
  const std::vector<double>& times_;
  const std::function<std::string(size_t)>& body_of_;
  const LoadOptions& opts_;
  const int64_t start_ns_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<size_t, std::string>> ready_;
  size_t taken_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace

const char* to_string(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kRefused:
      return "refused";
    case Status::kError:
      return "error";
    case Status::kTimeout:
      return "timeout";
  }
  return "?";
}

std::vector<Observed> run_open_loop(const std::vector<double>& times_s,
                                    const std::function<std::string(size_t)>& body_of,
                                    const LoadOptions& opts, int64_t start_ns) {
  const std::string& base = opts.base_url;
  if (base.rfind("http://", 0) != 0 && base.rfind("https://", 0) != 0)
    throw InvalidArgument("--url must start with http:// or https://, got '" + base + "'");
  for (size_t i = 1; i < times_s.size(); ++i)
    if (times_s[i] < times_s[i - 1]) throw InvalidArgument("run_open_loop: times must ascend");
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CURLM* multi = curl_multi_init();
  curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
  const std::string url = base + (base.back() == '/' ? "" : "/") + "v1/chat/completions";
  const int64_t t0 = start_ns ? start_ns : now_ns();
  std::vector<Observed> out(times_s.size());
  std::vector<std::unique_ptr<Transfer>> live(times_s.size());
  BodyBuilder builder(times_s, body_of, opts, t0);
  auto due = [&](size_t i) { return t0 + static_cast<int64_t>(times_s[i] * 1e9); };
  auto start = [&](size_t i) {
    auto t = std::make_unique<Transfer>();
    t->index = i;
    t->o = &out[i];
    t->body = builder.take(i);
    t->o->scheduled_ns = due(i);
    t->o->sent_ns = now_ns();
    t->headers = curl_slist_append(nullptr, "Content-Type: application/json");
    t->headers = curl_slist_append(t->headers, "Expect:");  // no 100-continue wait on big bodies
    CURL* e = curl_easy_init();
    if (!e) throw ResourceExhausted("cannot create an HTTP transfer (libcurl)");
    t->easy = e;
    curl_easy_setopt(e, CURLOPT_URL, url.c_str());
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->body.c_str());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, static_cast<long>(t->body.size()));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(opts.timeout_s * 1000));
    curl_multi_add_handle(multi, e);
    live[i] = std::move(t);
  };
  size_t sent = 0, finished = 0;
  auto pump = [&](int wait_ms) {
    int running = 0;
    curl_multi_perform(multi, &running);
    CURLMsg* msg;
    int left;
    while ((msg = curl_multi_info_read(multi, &left))) {
      if (msg->msg != CURLMSG_DONE) continue;
      CURL* e = msg->easy_handle;
      Transfer* t = nullptr;
      curl_easy_getinfo(e, CURLINFO_PRIVATE, &t);
      Observed& o = *t->o;
      curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &o.http_status);
      o.done_ns = now_ns();
      if (msg->data.result == CURLE_OPERATION_TIMEDOUT) {
        o.status = Status::kTimeout;
        o.error = "no complete answer within " + std::to_string(opts.timeout_s) + " s";
      } else if (msg->data.result != CURLE_OK) {
        o.status = Status::kError;
        o.error = curl_easy_strerror(msg->data.result);
      } else if (o.http_status == 200 && t->done_seen && o.error.empty()) {
        o.status = Status::kOk;
      } else if (o.http_status == 429 || o.http_status == 503) {
        o.status = Status::kRefused;
        read_error_body(t->error_body, o);
      } else {
        o.status = Status::kError;
        if (!t->error_body.empty()) read_error_body(t->error_body, o);
        if (o.error.empty()) o.error = "stream ended without [DONE]";
        o.error = "HTTP " + std::to_string(o.http_status) + ": " + o.error;
      }
      curl_multi_remove_handle(multi, e);
      curl_easy_cleanup(e);
      curl_slist_free_all(t->headers);
      live[t->index].reset();
      ++finished;
    }
    if (wait_ms > 0) curl_multi_poll(multi, nullptr, 0, wait_ms, nullptr);
  };
  int64_t next_progress = t0 + 1'000'000'000;
  try {
    while (sent < times_s.size() || finished < sent) {
      while (sent < times_s.size() && due(sent) <= now_ns()) start(sent++);
      int64_t wait = 5'000'000;
      if (sent < times_s.size()) wait = std::min(wait, due(sent) - now_ns());
      pump(static_cast<int>(std::max<int64_t>(0, wait / 1'000'000)));
      if (opts.progress && now_ns() > next_progress) {
        next_progress += 1'000'000'000;
        opts.progress(static_cast<double>(now_ns() - t0) * 1e-9, sent, finished);
      }
    }
  } catch (...) {  // a body that could not be built: every transfer in flight is dropped
    for (auto& t : live) {
      if (!t) continue;
      curl_multi_remove_handle(multi, t->easy);
      curl_easy_cleanup(t->easy);
      curl_slist_free_all(t->headers);
    }
    curl_multi_cleanup(multi);
    throw;
  }
  curl_multi_cleanup(multi);
  return out;
}

}  // namespace mmrt::verify
