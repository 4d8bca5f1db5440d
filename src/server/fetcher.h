// Media URLs fetched for requests (libcurl): a few threads, each reusing one connection cache,
// with a time limit, a byte cap (declared and streamed), bounded redirects that are checked
// like the first URL (http and https only, an optional host allow-list), and errors that name
// the URL and what went wrong. Callbacks run on a fetch thread.
#pragma once

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
  void fetch(std::string url, std::function<void(FetchResult)> done);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::server
