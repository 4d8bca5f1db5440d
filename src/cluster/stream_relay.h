// A streamed answer (server-sent events of the OpenAI API) relayed from a worker to the client,
// and resumed on another worker when the first fails mid-stream. The router asks every worker
// for its tokens' ids (`mmrt_stream_ids`: each chunk carries the ids of the tokens whose text
// it completes, `mmrt_ids`); the relay keeps them and takes them out of the chunks the client
// sees. After a failure the next worker gets the request with those ids (`mmrt_resume_ids`)
// and continues from exactly the tokens the client has: its stream goes on under the first
// answer's id, without a second role chunk, and its usage counts the resumed tokens. No token
// is lost or sent twice, whatever the two workers' numerics, and the new worker prefills the
// tokens already sent instead of generating them again.
// Plain data in, plain data out: unit-tested apart from any network.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mmrt::cluster {

class StreamRelay {
 public:
  // keep_ids: the client asked for the ids itself (they stay in its chunks).
  explicit StreamRelay(bool keep_ids = false) : keep_ids_(keep_ids) {}
  // Bytes from the worker being relayed; returns the bytes to send to the client now (complete
  // events only; a partial one waits for the rest).
  std::string feed(std::string_view bytes);
  // The worker failed: from now on feed() takes the next worker's stream, which continues from
  // ids() (sent to it as mmrt_resume_ids).
  void resume();
  const std::vector<int32_t>& ids() const { return ids_; }  // delivered tokens, in order
  const std::string& sent() const { return sent_; }         // content forwarded so far
  bool done() const { return done_; }                       // [DONE] forwarded

 private:
  std::string event(std::string_view block);

  bool keep_ids_;
  std::string pending_;  // a partial event
  std::string id_;       // the first answer's id
  std::string sent_;
  std::vector<int32_t> ids_;
  int64_t resumed_ = 0;  // tokens the current worker resumed from (its usage counts the rest)
  bool resuming_ = false, done_ = false, role_sent_ = false;
};

// `body` (a JSON object's text) with `"name":value,` spliced in after its opening brace: the
// body's bytes, media included, are not written again. `body` must hold another member.
std::string splice_member(const std::string& body, std::string_view name, std::string_view value);

}  // namespace mmrt::cluster
