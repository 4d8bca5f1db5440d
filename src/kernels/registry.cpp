#include "kernels/registry.h"

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#ifdef MMRT_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace mmrt::kernels {

std::span<const BackendEntry> backend_entries() {
  static const BackendEntry table[] = {
      cpu::backend_entry(),
#ifdef MMRT_WITH_CUDA
      cuda::backend_entry(),
#endif
  };
  return table;
}

std::vector<DeviceInfo> discover_devices() {
  std::vector<DeviceInfo> out;
  for (const BackendEntry& e : backend_entries())
    for (DeviceInfo& d : e.discover().devices) out.push_back(std::move(d));
  return out;
}

std::string describe_backends() {
  std::string built, seen;
  for (const BackendEntry& e : backend_entries()) {
    built += (built.empty() ? "" : ", ") + std::string(device_kind_name(e.kind));
    const DeviceDiscovery d = e.discover();
    std::string part;
    if (d.devices.empty()) {
      part = std::string(device_kind_name(e.kind)) + ": none (" + d.none_because + ")";
    } else {
      for (const DeviceInfo& x : d.devices)
        part += (part.empty() ? "" : ", ") + device_str(x.device) + " (" + x.name +
                (x.detail.empty() ? "" : ", " + x.detail) + ")";
    }
    seen += (seen.empty() ? "" : "; ") + part;
  }
  return "backends in this build: " + built + "; devices present: " + seen;
}

namespace {
const BackendEntry* entry_of(DeviceKind kind) {
  for (const BackendEntry& e : backend_entries())
    if (e.kind == kind) return &e;
  return nullptr;
}
}  // namespace

std::string device_unavailable(Device device) {
  const BackendEntry* e = entry_of(device.kind);
  if (!e)
    return std::string("this build has no ") + device_kind_name(device.kind) +
           " backend (configure with the CUDA toolkit present and -DMMRT_CUDA=ON)";
  const DeviceDiscovery d = e->discover();
  for (const DeviceInfo& x : d.devices)
    if (x.device == device) return "";
  return "not present (" +
         (d.devices.empty() ? d.none_because
                            : std::to_string(d.devices.size()) + " " + device_kind_name(e->kind) +
                                  " device(s) here") +
         ")";
}

std::unique_ptr<Backend> create_backend(Device device, const BackendOptions& opts) {
  if (const std::string why = device_unavailable(device); !why.empty())
    throw FailedPrecondition("device " + device_str(device) + ": " + why + "; " +
                             describe_backends());
  return entry_of(device.kind)->create(device, opts);
}

}  // namespace mmrt::kernels
