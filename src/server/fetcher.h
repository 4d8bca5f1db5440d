// Media URLs fetched for requests (libcurl): a few threads, each reusing one connection cache,
// with a time limit, a byte cap (declared and streamed), bounded redirects that are checked
// like the first URL (http and https only, an optional host allow-list), and errors that name
// the URL and what went wrong. Callbacks run on a fetch thread.
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
  size_t max_queued = 4096;                // fetches waiting for a thread
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
