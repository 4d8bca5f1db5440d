// The text side of a request's output: streaming detokenisation (complete UTF-8 only) and stop
// strings (text that may start one is held back until it cannot).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "io/tokenizer.h"

namespace mmrt::engine {

class OutputText {
 public:
  OutputText(const io::Tokenizer& tok, std::vector<std::string> stops);
  // The text that became safe to emit after token `id`. Ids the tokenizer does not know (a
  // checkpoint's padded vocabulary rows, gaps in its vocabulary) have no text.
  std::string push(int32_t id);
  // Takes `ids` as text already delivered elsewhere (a resumed stream): what they complete is
  // not returned, what they hold back (a partial character, a possible stop string's start) is
  // held back as after push().
  void prime(std::span<const int32_t> ids);
  bool stopped() const { return stops_.finished(); }  // a stop string appeared
  // End of generation: whatever is still held back.
  std::string finish();

 private:
  const io::Tokenizer& tok_;
  io::StreamingDetokenizer detok_;
  StopStringMatcher stops_;
};

}  // namespace mmrt::engine
