#include "server/fetcher.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
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

// An address block: IPv4 as IPv4-mapped IPv6, so one comparison covers both families.
struct Block {
  std::array<uint8_t, 16> net{};
  int bits = 0;  // of the 128
  bool contains(const std::array<uint8_t, 16>& a) const {
    for (int i = 0; i < bits; ++i) {
      const int byte = i / 8, bit = 7 - i % 8;
      if (((a[byte] >> bit) & 1) != ((net[byte] >> bit) & 1)) return false;
    }
    return true;
  }
};

std::array<uint8_t, 16> mapped_v4(const uint8_t* v4) {
  std::array<uint8_t, 16> a{};
  a[10] = a[11] = 0xff;
  std::memcpy(a.data() + 12, v4, 4);
  return a;
}

// "A.B.C.D[/n]" or "v6[/n]"; nullopt when malformed.
std::optional<Block> parse_block(const std::string& s) {
  const size_t slash = s.find('/');
  const std::string addr = s.substr(0, slash);
  Block b;
  int max_bits = 128, offset = 0;
  uint8_t v4[4];
  in6_addr v6;
  if (inet_pton(AF_INET, addr.c_str(), v4) == 1) {
    b.net = mapped_v4(v4);
    max_bits = 32;
    offset = 96;
  } else if (inet_pton(AF_INET6, addr.c_str(), &v6) == 1) {
    std::memcpy(b.net.data(), &v6, 16);
  } else {
    return std::nullopt;
  }
  int bits = max_bits;
  if (slash != std::string::npos) {
    const std::string n = s.substr(slash + 1);
    if (n.empty() || n.size() > 3 || n.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    bits = std::stoi(n);
    if (bits > max_bits) return std::nullopt;
  }
  b.bits = offset + bits;
  return b;
}

// Not public: refused as a fetch destination unless --fetch-allow covers it.
const std::vector<Block>& not_public() {
  static const std::vector<Block> blocks = [] {
    std::vector<Block> v;
    for (const char* s :
         {"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
          "172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/3",
          "::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "64:ff9b::/96"})
      v.push_back(*parse_block(s));
    return v;
  }();
  return blocks;
}

struct Destinations {
  std::vector<Block> allow;
  bool allowed(const sockaddr* sa) const {
    std::array<uint8_t, 16> a{};
    if (sa->sa_family == AF_INET) {
      a = mapped_v4(
          reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(sa)->sin_addr));
    } else if (sa->sa_family == AF_INET6) {
      std::memcpy(a.data(), &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, 16);
    } else {
      return false;
    }
    for (const Block& b : allow)
      if (b.contains(a)) return true;
    for (const Block& b : not_public())
      if (b.contains(a)) return false;
    return true;
  }
};

struct SocketGate {
  const Destinations* dest;
  bool refused = false;
};

// Every connection libcurl opens passes here with the address it resolved: the destination
// check cannot be raced by DNS (the address checked is the one connected).
curl_socket_t open_socket(void* user, curlsocktype, curl_sockaddr* a) {
  auto* g = static_cast<SocketGate*>(user);
  if (!g->dest->allowed(&a->addr)) {
    g->refused = true;
    return CURL_SOCKET_BAD;
  }
  return socket(a->family, a->socktype, a->protocol);
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
  Destinations dest;
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
      // The destination check needs the real destination: no proxy from the environment.
      curl_easy_setopt(c, CURLOPT_PROXY, "");
      SocketGate gate{&dest};
      curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
      curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &gate);
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
        // One answer for every way a connection fails (refused, unreachable, closed, reset, a
        // destination not allowed): telling them apart would map the server's network.
        r.status = 400;
        r.error = "could not fetch media URL " + shown(url) +
                  (hop ? " (a redirect of " + shown(first) + ")" : "") + ": could not connect";
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
  for (const std::string& s : opt.allow) {
    auto b = parse_block(s);
    if (!b)
      throw InvalidArgument("--fetch-allow: '" + s +
                            "' is not an address block (A.B.C.D[/n] or an IPv6 address[/n])");
    impl_->dest.allow.push_back(*b);
  }
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
