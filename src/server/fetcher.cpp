#include "server/fetcher.h"

#include <curl/curl.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "core/clock.h"
#include "io/file.h"

namespace mmrt::server {
namespace {

struct Sink {
  std::vector<uint8_t>* out;
  uint64_t max;
  bool over = false;
};

size_t on_data(char* p, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  const size_t len = size * n;
  if (s->out->size() + len > s->max) {
    s->over = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  s->out->insert(s->out->end(), p, p + len);
  return len;
}

// The URL's scheme and host, or an error text.
std::string check_url(const std::string& url, const FetchOptions& opt, int& status) {
  CURLU* u = curl_url();
  std::string why;
  if (curl_url_set(u, CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) {
    why = "is not a valid URL";
    status = 400;
  } else {
    char* scheme = nullptr;
    char* host = nullptr;
    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
    curl_url_get(u, CURLUPART_HOST, &host, 0);
    const std::string sc = scheme ? scheme : "", h = host ? host : "";
    if (sc != "http" && sc != "https") {
      why = "is not http or https";
      status = 400;
    } else if (!opt.allowed_hosts.empty() &&
               std::find(opt.allowed_hosts.begin(), opt.allowed_hosts.end(), h) ==
                   opt.allowed_hosts.end()) {
      why = "names host " + h + ", which is not in --allowed-media-hosts";
      status = 403;
    }
    curl_free(scheme);
    curl_free(host);
  }
  curl_url_cleanup(u);
  return why;
}

std::string shown(const std::string& url) {
  return url.size() > 120 ? url.substr(0, 120) + "..." : url;
}

}  // namespace

struct MediaFetcher::Impl {
  FetchOptions opt;
  std::mutex mu;
  std::condition_variable cv;
  struct Job {
    std::string url;
    std::shared_ptr<std::atomic<bool>> cancelled;
    std::function<void(FetchResult)> done;
  };
  std::deque<Job> queue;
  bool stop = false;
  std::vector<std::thread> threads;

  void run() {
    CURL* c = curl_easy_init();  // one per thread: its connections are reused
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stop || !queue.empty(); });
        if (stop) break;
        job = std::move(queue.front());
        queue.pop_front();
      }
      FetchResult r;
      if (job.cancelled && job.cancelled->load())
        r = FetchResult{{}, 499, "cancelled", 0};
      else
        r = c ? get(c, job.url) : FetchResult{{}, 500, "libcurl failed to start", 0};
      job.done(std::move(r));
    }
    if (c) curl_easy_cleanup(c);
  }

  FetchResult get(CURL* c, std::string url) {
    FetchResult r;
    const int64_t t0 = now_ns();
    const int64_t deadline = t0 + static_cast<int64_t>(opt.timeout_s * 1e9);
    const std::string first = url;
    for (int hop = 0;; ++hop) {
      int status = 400;
      const std::string bad = check_url(url, opt, status);
      if (!bad.empty()) {
        r.status = status;
        r.error = "media URL " + shown(url) + (hop ? " (a redirect of " + shown(first) + ")" : "") +
                  " " + bad;
        break;
      }
      const int64_t left_ms = std::max<int64_t>(1, (deadline - now_ns()) / 1'000'000);
      r.bytes.clear();
      Sink sink{&r.bytes, opt.max_bytes};
      curl_easy_reset(c);
      curl_easy_setopt(c, CURLOPT_URL, url.c_str());
      curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);  // each hop is checked here
      curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(left_ms));
      curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(left_ms));
      curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(opt.max_bytes));
      curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
      curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
      curl_easy_setopt(c, CURLOPT_USERAGENT, "mmrt");
      const CURLcode rc = curl_easy_perform(c);
      long code = 0;
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
      if (sink.over || rc == CURLE_FILESIZE_EXCEEDED) {
        r.status = 413;
        r.error = "media URL " + shown(url) + " holds more than " +
                  io::format_bytes(opt.max_bytes) + " (the server's --max-media-mb)";
        break;
      }
      if (rc == CURLE_OPERATION_TIMEDOUT) {
        r.status = 400;
        r.error = "fetching media URL " + shown(first) + " took longer than " +
                  std::to_string(opt.timeout_s).substr(0, 4) + " s (--media-fetch-timeout)";
        break;
      }
      if (rc != CURLE_OK) {
        r.status = 400;
        r.error = "fetching media URL " + shown(url) + " failed: " + curl_easy_strerror(rc);
        break;
      }
      if (code >= 300 && code < 400) {
        char* loc = nullptr;
        curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc);
        if (!loc) {
          r.status = 400;
          r.error = "media URL " + shown(url) + " answered " + std::to_string(code) +
                    " without a Location";
          break;
        }
        if (hop >= opt.max_redirects) {
          r.status = 400;
          r.error = "media URL " + shown(first) + " redirects more than " +
                    std::to_string(opt.max_redirects) + " times";
          break;
        }
        url = loc;
        continue;
      }
      if (code != 200) {
        r.status = 400;
        r.error = "media URL " + shown(url) + " answered HTTP " + std::to_string(code);
        break;
      }
      if (r.bytes.empty()) {
        r.status = 400;
        r.error = "media URL " + shown(url) + " returned no data";
      }
      break;
    }
    if (!r.error.empty()) r.bytes.clear();
    r.seconds = static_cast<double>(now_ns() - t0) * 1e-9;
    return r;
  }
};

MediaFetcher::MediaFetcher(const FetchOptions& opt) : impl_(std::make_unique<Impl>()) {
  impl_->opt = opt;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  for (int i = 0; i < std::max(1, opt.threads); ++i)
    impl_->threads.emplace_back([this] { impl_->run(); });
}

MediaFetcher::~MediaFetcher() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  for (auto& t : impl_->threads) t.join();
}

void MediaFetcher::fetch(std::string url, std::shared_ptr<std::atomic<bool>> cancelled,
                         std::function<void(FetchResult)> done) {
  bool queued = false;
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    if (impl_->queue.size() < impl_->opt.max_queued) {
      impl_->queue.push_back({std::move(url), std::move(cancelled), done});
      queued = true;
    }
  }
  if (!queued)
    return done(FetchResult{{}, 503, "too many media downloads are waiting; retry later", 0});
  impl_->cv.notify_one();
}

}  // namespace mmrt::server
