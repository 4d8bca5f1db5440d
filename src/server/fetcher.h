// Media URLs fetched for requests (libcurl): a few threads, each reusing one connection cache,
// with a time limit, a byte cap (declared and streamed), bounded redirects that are checked
// like the first URL (http and https only, an optional host allow-list), and errors that name
// the URL and what went wrong. Callbacks run on a fetch thread.
//
// No oracle into the server's network: every connection's address (after DNS, on every
// redirect hop, the address actually connected) is checked, and loopback, private, link-local,
// shared (CGNAT), multicast and unspecified addresses are refused unless `allow` covers them.
// A connection that fails says only "could not connect", whatever the cause (refused,
// unreachable, closed, not allowed), and nothing of a fetched body is quoted.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mmrt::server {

struct FetchOptions {
  int threads = 4;
  double timeout_s = 5;  // the whole transfer, redirects included (vLLM: 5 s for images)
  uint64_t max_bytes = 32ull << 20;
  int max_redirects = 3;
  std::vector<std::string> allowed_hosts;  // empty: any host
  // CIDR blocks ("10.0.0.0/8", "::1/128", "127.0.0.1" = /32) a fetch may connect to although
  // they are not public (--fetch-allow). InvalidArgument at construction for a malformed one.
  std::vector<std::string> allow;
  size_t max_queued = 4096;  // fetches waiting for a thread
};

struct FetchResult {
  std::vector<uint8_t> bytes;
  int status = 0;      // HTTP status to answer with when `error` is set (400, 403, 413)
  std::string error;   // empty on success
  double seconds = 0;  // the transfer's wall time
};

class MediaFetcher {
 public:
  explicit MediaFetcher(const FetchOptions& opt);
  ~MediaFetcher();  // waits for the transfers in progress; queued ones are dropped
  // `done` gets the bytes or the error; a fetch still queued when `*cancelled` turns true is
  // skipped (error "cancelled"), and one beyond max_queued is refused at once (503).
  void fetch(std::string url, std::shared_ptr<std::atomic<bool>> cancelled,
             std::function<void(FetchResult)> done);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::server
