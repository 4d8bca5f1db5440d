// One try of one request on one worker (internal to the router): the libcurl callbacks that
// read the worker's answer and relay it to the client's exchange: a streamed answer through the
// request's StreamRelay as it comes, a whole one (or a refusal held back while another worker is
// left to try) buffered.
#pragma once

#include <curl/curl.h>

#include <atomic>
#include <memory>
#include <string>

#include "cluster/stream_relay.h"
#include "server/http.h"

namespace mmrt::cluster {

struct Attempt {
  std::shared_ptr<server::Exchange> ex;
  std::shared_ptr<std::atomic<bool>> gone;
  const std::atomic<bool>* abort_all = nullptr;
  std::string worker_id;
  int64_t predicted_cached = -1;  // prompt tokens the router predicted cached there (-1: none)
  double predicted_ttft_ms = -1;  // the router's predicted first token there (-1: none)
  bool may_pass_on = false;       // another worker is left to try
  StreamRelay* relay = nullptr;   // the request's stream, across its workers
  bool* begun = nullptr;          // the client's stream has begun (by this worker or an earlier)
  int status = 0;
  server::Headers headers;
  std::string content_type;
  bool decided = false, passing_on = false, streaming = false, overflow = false;
  std::string body;  // buffered (a whole answer, or a refusal held back)

  server::HttpResponse response_head() const;
};

// Headers that belong to one connection, not to the request or answer relayed.
bool hop_by_hop(const std::string& lower_name);

// CURLOPT_HEADERFUNCTION, _WRITEFUNCTION and _XFERINFOFUNCTION, their data an Attempt.
size_t on_header(char* p, size_t size, size_t n, void* attempt);
size_t on_body(char* p, size_t size, size_t n, void* attempt);
int on_progress(void* attempt, curl_off_t, curl_off_t, curl_off_t, curl_off_t);

}  // namespace mmrt::cluster
