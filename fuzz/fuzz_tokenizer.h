// The tokenizer the text fuzzers run through: the tiny checkpoint's (fuzz/corpus), loaded once.
#pragma once

#include "io/tokenizer.h"

inline const mmrt::io::Tokenizer& fuzz_tokenizer() {
  static const auto tok = mmrt::io::Tokenizer::from_file(MMRT_FUZZ_TOKENIZER);
  return tok;
}
