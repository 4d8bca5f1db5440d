#include "core/device.h"

#include <charconv>

#include "core/error.h"

namespace mmrt {

const char* device_kind_name(DeviceKind k) {
  switch (k) {
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return "cuda";
  }
  return "?";
}

std::string device_str(Device d) {
  if (d.kind == DeviceKind::kCpu) return "cpu";
  return std::string(device_kind_name(d.kind)) + ":" + std::to_string(d.index);
}

Device parse_device(std::string_view s) {
  auto bad = [&] {
    return InvalidArgument("unknown device '" + std::string(s.substr(0, 40)) +
                           "': expected cpu, cuda or cuda:N (N = 0, 1, ...)");
  };
  if (s == "cpu") return {};
  if (s == "cuda") return {.kind = DeviceKind::kCuda, .index = 0};
  if (s.starts_with("cuda:")) {
    const std::string_view n = s.substr(5);
    int32_t idx = -1;
    auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), idx);
    if (n.empty() || ec != std::errc() || p != n.data() + n.size() || idx < 0 || idx > 1023)
      throw bad();
    return {.kind = DeviceKind::kCuda, .index = idx};
  }
  throw bad();
}

}  // namespace mmrt
