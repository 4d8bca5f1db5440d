// An HTTP request body for /v1/chat/completions or /v1/completions (the first byte picks the
// endpoint and whether local media files are allowed), parsed and checked as `mmrt serve` does
// before anything reaches the engine. Any input may be refused with an ApiError; nothing may
// crash, hang or allocate without bound (media caps are small here).
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const mmrt::engine::SlaConfig sla = mmrt::engine::SlaConfig::defaults();
  mmrt::server::ApiOptions opt;
  opt.model_id = "tiny";
  opt.sla = &sla;
  opt.tiers = mmrt::server::default_tiers();
  opt.max_media_bytes = 1 << 20;
  opt.max_media_items = 8;
  if (data[0] & 2) opt.allowed_media_dir = "/nonexistent-mmrt-fuzz";
  const auto ep =
      (data[0] & 1) ? mmrt::server::Endpoint::kCompletion : mmrt::server::Endpoint::kChat;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    (void)mmrt::server::parse_request(body, ep, opt);
  } catch (const mmrt::server::ApiError&) {
  }
  return 0;
}
