// config.json and preprocessor_config.json text of every family: parsed and validated as every
// command does. The first byte picks the file: bit 0 config.json (0) or preprocessor_config.json
// (1), (byte >> 1) % 3 the family (Qwen2-VL, LLaVA, Fuyu), bit 7 LLaVA-NeXT's anyres
// keys. Any input may fail with an
// mmrt::Error; nothing may crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "models/fuyu/config.h"
#include "models/fuyu/image_processor.h"
#include "models/llava/config.h"
#include "models/llava/image_processor.h"
#include "models/qwen2_vl/config.h"
#include "models/qwen2_vl/image_processor.h"

using namespace mmrt::models;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const bool pp = data[0] & 1;
  try {
    switch ((data[0] >> 1) % 3) {
      case 0:
        if (pp)
          (void)qwen2_vl::ImageProcessorConfig::from_json(text, "preprocessor_config.json");
        else
          qwen2_vl::parse_config(text, "config.json").validate("config.json");
        break;
      case 1:
        if (pp)
          (void)llava::ImageProcessorConfig::from_json(text, "preprocessor_config.json",
                                                       (data[0] & 0x80) != 0);
        else
          llava::parse_config(text, "config.json").validate("config.json");
        break;
      default:
        if (pp)
          (void)fuyu::ImageProcessorConfig::from_json(text, "preprocessor_config.json");
        else
          fuyu::parse_config(text, "config.json").validate("config.json");
    }
  } catch (const mmrt::Error&) {
  }
  return 0;
}
