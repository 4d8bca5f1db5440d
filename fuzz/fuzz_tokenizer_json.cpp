// tokenizer.json text as a checkpoint ships it: loaded as the engine loads it; a tokenizer that
// loads must then encode and decode a fixed sample. Nothing may crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto tok = mmrt::io::Tokenizer::from_json(
        std::string_view(reinterpret_cast<const char*>(data), size), "tokenizer.json");
    (void)tok.decode(tok.encode("Hello, world! <|im_start|>user 123\n"));
  } catch (const mmrt::Error&) {
  }
  return 0;
}
