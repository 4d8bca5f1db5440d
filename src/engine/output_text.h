// The text side of a request's output: streaming detokenisation (complete UTF-8 only) and stop
// strings (text that may start one is held back until it cannot).
#pragma once

#include <cstdint>
#include <memory>
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
  bool stopped() const { return stops_.finished(); }  // a stop string appeared
  // End of generation: whatever is still held back.
  std::string finish();

 private:
  const io::Tokenizer& tok_;
  io::StreamingDetokenizer detok_;
  StopStringMatcher stops_;
};

}  // namespace mmrt::engine
