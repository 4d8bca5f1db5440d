// Where memory lives and where compute runs: a device kind and its index ("cpu", "cuda:1").
// Plain data; which devices a build has and which are present is the kernels registry's
// business (kernels/registry.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mmrt {

enum class DeviceKind : uint8_t {
  kCpu,   // host memory, the CPU backend
  kCuda,  // an NVIDIA GPU through the CUDA runtime
};

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int32_t index = 0;  // which device of its kind (always 0 for the CPU)

  bool is_host() const { return kind == DeviceKind::kCpu; }
  bool operator==(const Device&) const = default;
};

const char* device_kind_name(DeviceKind k);  // "cpu", "cuda"
std::string device_str(Device d);            // "cpu", "cuda:0"
// "cpu", "cuda" (index 0) or "cuda:N". Throws InvalidArgument naming the accepted forms.
Device parse_device(std::string_view s);

}  // namespace mmrt
