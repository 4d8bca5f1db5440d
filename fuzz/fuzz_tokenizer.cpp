// Text and token ids from requests, through the tiny checkpoint's tokenizer (a byte-level BPE
// with the Qwen2 pre-tokenizer and added tokens): encode any bytes (invalid UTF-8 included),
// decode what came out (for valid UTF-8 it must give back the NFC form of the text: the round trip
// is lossless), and decode arbitrary ids (out-of-range ids are InvalidArgument). Nothing may
// crash.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "fuzz_tokenizer.h"
#include "io/unicode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& tok = fuzz_tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tok.encode(text);
  const std::string back = tok.decode(ids);
  if (mmrt::io::unicode::is_valid_utf8(text) && back != mmrt::io::unicode::nfc(text))
    __builtin_trap();
  std::vector<int32_t> raw(size / 4);
  if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * 4);
  try {
    (void)tok.decode(raw, (size & 1) != 0);
  } catch (const mmrt::Error&) {
  }
  return 0;
}
