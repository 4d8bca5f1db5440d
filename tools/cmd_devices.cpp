// `mmrt devices`: the compute backends of this build and the devices each sees now.
#include <cstdio>
#include <string>

#include "cli.h"
#include "core/device.h"
#include "kernels/registry.h"

namespace mmrt::cli {
namespace {

int run(Args& args) {
  args.finish();
  std::printf("%-8s %-10s %-44s %s\n", "backend", "device", "name", "memory, detail");
  for (const kernels::BackendEntry& e : kernels::backend_entries()) {
    const kernels::DeviceDiscovery d = e.discover();
    if (d.devices.empty())
      std::printf("%-8s %-10s %s\n", device_kind_name(e.kind), "-",
                  ("none: " + d.none_because).c_str());
    for (const kernels::DeviceInfo& x : d.devices)
      std::printf("%-8s %-10s %-44s %.1f GiB, %s\n", device_kind_name(e.kind),
                  device_str(x.device).c_str(), x.name.c_str(),
                  static_cast<double>(x.memory_bytes) / double(1ull << 30), x.detail.c_str());
  }
  return 0;
}

}  // namespace

MMRT_COMMAND("devices", "list this build's compute backends and the devices they see",
             R"(usage: mmrt devices

Lists every compute backend this build has (cpu always; cuda when it was built with the CUDA
toolkit) and the devices each finds now: name, memory and details (cores; compute capability
and SMs). A backend that finds none says why (no CUDA driver, no device). Pass a device it lists
to --device on any command that loads a model (generate, bench, serve, bench-model, bench-video,
demo): cpu, cuda (= cuda:0) or cuda:N.
)",
             {}, &run);

}  // namespace mmrt::cli
