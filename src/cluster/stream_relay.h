// A streamed answer (server-sent events of the OpenAI API) relayed from a worker to the client,
// and resumed on another worker when the first fails mid-stream: the router replays the same
// request there (deterministic: greedy or seeded, so the same tokens come again), and the relay
// drops the replay's first characters of content, those the client already has, forwarding the
// rest under the first answer's id. The client sees one stream: no token lost, none twice.
// Plain data in, plain data out: unit-tested apart from any network.
#pragma once

#include <string>
#include <string_view>

namespace mmrt::cluster {

class StreamRelay {
 public:
  // Bytes from the worker being relayed; returns the bytes to send to the client now (complete
  // events only; a partial one waits for the rest).
  std::string feed(std::string_view bytes);
  // The worker failed: from now on feed() takes the next worker's stream of the same request.
  void replay();
  const std::string& sent() const { return sent_; }  // content forwarded so far
  bool done() const { return done_; }                // [DONE] forwarded

 private:
  std::string event(std::string_view block);

  std::string pending_;  // a partial event
  std::string id_;       // the first answer's id
  std::string sent_;
  size_t skip_ = 0;  // content characters of the replay still to drop
  bool replaying_ = false, done_ = false;
};

}  // namespace mmrt::cluster
