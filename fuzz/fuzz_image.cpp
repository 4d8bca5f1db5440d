// Image bytes from the network: header probe, decode (JPEG, PNG, WebP), resize and patchify as
// Qwen2-VL's processor runs them. Any input may fail with an mmrt::Error; nothing may crash,
// leak, read out of bounds or overflow. The first byte picks the mode (reference / fast).
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "media/image.h"
#include "models/qwen2_vl/image_processor.h"

using namespace mmrt;
using namespace mmrt::models::qwen2_vl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::span<const uint8_t> bytes(data + 1, size - 1);
  ImageProcessorConfig cfg;
  cfg.max_pixels = 256 * 256;  // keeps each run short; the bounds logic is the same
  PreprocessOptions opts;
  opts.mode = (data[0] & 1) ? PreprocessMode::kFast : PreprocessMode::kReference;
  opts.max_source_pixels = 1u << 22;  // 4 Mpixel: larger claims must be refused, not decoded
  try {
    (void)media::probe_image(bytes, {.max_pixels = opts.max_source_pixels});
    (void)preprocess_image(bytes, cfg, opts);
  } catch (const Error&) {
  }
  return 0;
}
