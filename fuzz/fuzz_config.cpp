// config.json and preprocessor_config.json text: parsed and validated as every command does.
// The first byte picks the file. Any input may fail with an mmrt::Error; nothing may crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "models/qwen2_vl/config.h"
#include "models/qwen2_vl/image_processor.h"

using namespace mmrt::models::qwen2_vl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] & 1) {
      (void)ImageProcessorConfig::from_json(text, "preprocessor_config.json");
    } else {
      const Config c = parse_config(text, "config.json");
      c.validate("config.json");
    }
  } catch (const mmrt::Error&) {
  }
  return 0;
}
