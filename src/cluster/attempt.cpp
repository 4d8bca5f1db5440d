#include "cluster/attempt.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace mmrt::cluster {

using server::HttpResponse;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

constexpr size_t kMaxBufferedAnswer = 64 << 20;  // a whole (not streamed) answer

}  // namespace

bool hop_by_hop(const std::string& name) {
  static const std::set<std::string> kNames = {"connection", "keep-alive",     "transfer-encoding",
                                               "te",         "trailer",        "upgrade",
                                               "host",       "content-length", "expect",
                                               "date",       "server"};
  return kNames.count(name) > 0;
}

size_t on_header(char* p, size_t size, size_t n, void* user) {
  auto& a = *static_cast<Attempt*>(user);
  std::string line(p, size * n);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.rfind("HTTP/", 0) == 0) {  // a status line (again after a 100 Continue)
    const size_t sp = line.find(' ');
    a.status = sp == std::string::npos ? 0 : std::atoi(line.c_str() + sp + 1);
    a.headers.clear();
    a.content_type.clear();
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = lower(line.substr(0, colon)), value = line.substr(colon + 1);
  value.erase(0, value.find_first_not_of(" \t"));
  if (name == "content-type")
    a.content_type = value;
  else if (!hop_by_hop(name))
    a.headers.emplace_back(std::move(name), std::move(value));
  return size * n;
}

namespace {

size_t relay_body(char* p, size_t size, size_t n, Attempt& a) {
  if (a.gone->load() || a.abort_all->load()) return 0;
  if (!a.decided) {
    a.decided = true;
    a.passing_on = a.may_pass_on && (a.status == 429 || a.status == 503);
    a.streaming =
        !a.passing_on && a.status == 200 && a.content_type.rfind("text/event-stream", 0) == 0;
    if (a.streaming && !*a.begun) {
      *a.begun = true;
      a.ex->post([ex = a.ex, head = a.response_head()]() mutable {
        if (!ex->aborted()) ex->begin_stream(std::move(head));
      });
    }
  }
  if (a.streaming) {
    std::string out = a.relay->feed(std::string_view(p, size * n));
    if (!out.empty())
      a.ex->post([ex = a.ex, out = std::move(out)]() mutable {
        if (!ex->aborted()) ex->write(std::move(out));
      });
  } else {
    if (a.body.size() + size * n > kMaxBufferedAnswer) {
      a.overflow = true;
      return 0;
    }
    a.body.append(p, size * n);
  }
  return size * n;
}

}  // namespace

size_t on_body(char* p, size_t size, size_t n, void* user) {
  // No exception may cross libcurl (C): one ends this try as a failed transfer.
  try {
    return relay_body(p, size, n, *static_cast<Attempt*>(user));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mmrt router: relaying worker %s's answer: %s\n",
                 static_cast<Attempt*>(user)->worker_id.c_str(), e.what());
    return 0;
  }
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto& a = *static_cast<Attempt*>(user);
  return a.gone->load() || a.abort_all->load() ? 1 : 0;
}

HttpResponse Attempt::response_head() const {
  HttpResponse r;
  r.status = status;
  r.content_type = content_type.empty() ? "application/json" : content_type;
  r.headers = headers;
  r.headers.emplace_back("x-mmrt-worker", worker_id);
  if (predicted_cached >= 0)
    r.headers.emplace_back("x-mmrt-predicted-cached-tokens", std::to_string(predicted_cached));
  if (predicted_ttft_ms >= 0)
    r.headers.emplace_back("x-mmrt-predicted-ttft-ms",
                           std::to_string(static_cast<int64_t>(std::lround(predicted_ttft_ms))));
  return r;
}

}  // namespace mmrt::cluster
