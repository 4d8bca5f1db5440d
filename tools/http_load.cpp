#include "http_load.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"

namespace mmrt::cli {
namespace {

using nlohmann::json;

std::string base64(const std::vector<uint8_t>& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    const uint32_t v = (uint32_t{in[i]} << 16) |
                       (i + 1 < in.size() ? uint32_t{in[i + 1]} << 8 : 0) |
                       (i + 2 < in.size() ? uint32_t{in[i + 2]} : 0);
    out += t[(v >> 18) & 63];
    out += t[(v >> 12) & 63];
    out += i + 1 < in.size() ? t[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? t[v & 63] : '=';
  }
  return out;
}

// The trace item as an OpenAI chat request (images as data URLs, streamed with usage).
std::string body_of(const TraceItem& it) {
  const engine::GenerateRequest& g = it.request;
  json msgs = json::array();
  size_t media = 0;
  for (const auto& m : g.messages) {
    json parts = json::array();
    for (const auto& p : m.content) {
      if (p.kind == models::ContentPart::Kind::kText) {
        parts.push_back({{"type", "text"}, {"text", p.text}});
      } else {
        const auto& bytes = g.media.at(media++).bytes;
        parts.push_back({{"type", "image_url"},
                         {"image_url", {{"url", "data:image/png;base64," + base64(bytes)}}}});
      }
    }
    msgs.push_back({{"role", m.role}, {"content", parts}});
  }
  const engine::SamplingParams& s = g.sampling;
  json b = {{"messages", msgs},
            {"max_tokens", s.max_tokens},
            {"temperature", s.temperature},
            {"seed", s.seed},
            {"ignore_eos", s.ignore_eos},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
  if (!it.sla_class.empty()) b["sla_class"] = it.sla_class;
  return b.dump();
}

struct Transfer {
  size_t index = 0;
  int64_t t0 = 0;  // the scheduled send time
  std::string body, buf, error_body;
  curl_slist* headers = nullptr;
  engine::RequestResult r;
  bool done_seen = false;
  std::string finish;

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
      const bool first = r.timeline.count(engine::Event::kFirstToken) == 0;
      r.timeline.add(first ? engine::Event::kFirstToken : engine::Event::kToken, now_ns());
      return;
    }
    json d = json::parse(data, nullptr, false);
    if (d.is_discarded()) return;
    if (d.contains("error")) {
      r.reason = d["error"].value("message", "error");
      return;
    }
    if (d.contains("usage") && d["usage"].is_object()) {
      r.prompt_tokens = d["usage"].value("prompt_tokens", 0);
      r.tokens.resize(static_cast<size_t>(d["usage"].value("completion_tokens", 0)));
      if (d["usage"].contains("prompt_tokens_details"))
        r.cached_prompt_tokens = d["usage"]["prompt_tokens_details"].value("cached_tokens", 0);
    }
    if (d.contains("mmrt") && d["mmrt"]["sla_class"].is_string())
      r.sla_class = d["mmrt"]["sla_class"].get<std::string>();
    if (!d.contains("choices") || d["choices"].empty()) return;
    const json& c = d["choices"][0];
    if (c.contains("finish_reason") && c["finish_reason"].is_string())
      finish = c["finish_reason"].get<std::string>();
    if (c.contains("delta") && c["delta"].contains("content") &&
        c["delta"]["content"].is_string() && !c["delta"]["content"].get<std::string>().empty()) {
      const bool first = r.timeline.count(engine::Event::kFirstToken) == 0;
      r.timeline.add(first ? engine::Event::kFirstToken : engine::Event::kToken, now_ns());
      r.text += c["delta"]["content"].get<std::string>();
    }
  }
};

size_t on_data(char* p, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
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
    t->error_body += t->buf;
    t->buf.clear();
  }
  return size * n;
}

}  // namespace

std::vector<engine::RequestResult> run_http_trace(const std::string& base_url,
                                                  const std::vector<TraceItem>& trace, int warmup,
                                                  bool progress) {
  if (base_url.rfind("http://", 0) != 0 && base_url.rfind("https://", 0) != 0)
    throw InvalidArgument("--url must start with http:// or https://, got '" + base_url + "'");
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CURLM* multi = curl_multi_init();
  curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
  const std::string url = base_url + (base_url.back() == '/' ? "" : "/") + "v1/chat/completions";
  std::vector<std::unique_ptr<Transfer>> xfers;
  auto start = [&](const TraceItem& it, size_t index, int64_t t0) {
    auto t = std::make_unique<Transfer>();
    t->index = index;
    t->t0 = t0;
    t->body = body_of(it);
    t->r.timeline.add(engine::Event::kReceived, t0);
    t->headers = curl_slist_append(nullptr, "Content-Type: application/json");
    t->headers = curl_slist_append(t->headers, "Expect:");  // no 100-continue wait on big bodies
    CURL* e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_URL, url.c_str());
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->body.c_str());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, static_cast<long>(t->body.size()));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_multi_add_handle(multi, e);
    xfers.push_back(std::move(t));
  };
  size_t finished = 0;
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
      long code = 0;
      curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
      engine::RequestResult& r = t->r;
      r.timeline.add(engine::Event::kFinished, now_ns());
      if (msg->data.result != CURLE_OK) {
        r.outcome = engine::Outcome::kFailed;
        r.reason = curl_easy_strerror(msg->data.result);
      } else if (code == 200 && t->done_seen && r.reason.empty()) {
        r.outcome = t->finish == "stop" ? engine::Outcome::kStopped : engine::Outcome::kFinished;
      } else if (code == 429 || code == 503) {
        r.outcome = engine::Outcome::kRefused;
        r.reason = t->error_body;
      } else {
        r.outcome = engine::Outcome::kFailed;
        if (r.reason.empty()) r.reason = "HTTP " + std::to_string(code) + " " + t->error_body;
      }
      curl_multi_remove_handle(multi, e);
      curl_easy_cleanup(e);
      curl_slist_free_all(t->headers);
      ++finished;
    }
    if (wait_ms > 0) curl_multi_poll(multi, nullptr, 0, wait_ms, nullptr);
  };
  // Warm-up, not reported: half of it one at a time, as the in-process bench does.
  for (int i = 0; i < warmup && i < static_cast<int>(trace.size()); ++i) {
    TraceItem w = trace[static_cast<size_t>(i)];
    w.sla_class.clear();
    start(w, SIZE_MAX, now_ns());
    if (i % 2 == 1)
      while (finished < xfers.size()) pump(5);
  }
  while (finished < xfers.size()) pump(5);
  xfers.clear();
  finished = 0;
  const int64_t t0 = now_ns();
  int64_t next_progress = t0 + 1'000'000'000;
  size_t sent = 0;
  while (sent < trace.size() || finished < xfers.size()) {
    const int64_t now = now_ns();
    while (sent < trace.size() && t0 + static_cast<int64_t>(trace[sent].t_s * 1e9) <= now) {
      start(trace[sent], sent, t0 + static_cast<int64_t>(trace[sent].t_s * 1e9));
      ++sent;
    }
    int64_t wait = 5'000'000;
    if (sent < trace.size())
      wait = std::min(wait, t0 + static_cast<int64_t>(trace[sent].t_s * 1e9) - now_ns());
    pump(static_cast<int>(std::max<int64_t>(0, wait / 1'000'000)));
    if (progress && now_ns() > next_progress) {
      next_progress += 1'000'000'000;
      std::fprintf(stderr, "\r[http] %5.1fs  sent %zu/%zu  finished %zu   ",
                   static_cast<double>(now_ns() - t0) * 1e-9, sent, trace.size(), finished);
      std::fflush(stderr);
    }
  }
  if (progress) std::fprintf(stderr, "\n");
  curl_multi_cleanup(multi);
  std::vector<engine::RequestResult> out(trace.size());
  for (auto& t : xfers) out[t->index] = std::move(t->r);
  return out;
}

}  // namespace mmrt::cli
