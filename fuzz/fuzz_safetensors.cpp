// A .safetensors file's bytes as a checkpoint would hold them: header length, JSON header,
// dtypes, shapes, offsets. Invalid files are FormatErrors; nothing may crash.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)mmrt::io::parse_safetensors({data, size}, "fuzz.safetensors");
  } catch (const mmrt::Error&) {
  }
  return 0;
}
