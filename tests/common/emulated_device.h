// The CPU backend's kernels on memory it calls a GPU's ("cuda:99"): model and engine code run on
// it as on a GPU as far as memory goes — a host tensor handed to an op, weights packed for
// another device, or a host copy of device memory is an error — without a GPU. What it cannot
// see: host code that dereferences device memory directly (the memory is the host's here).
// MMRT_TEST_DEVICE=emulated runs the model suites on it (test_model.h; ctest models_ref_emulated).
#pragma once

#include <string>

#include "kernels/cpu/cpu_backend.h"

namespace mmrt::test {

inline constexpr Device kEmulatedDevice{.kind = DeviceKind::kCuda, .index = 99};

class EmulatedDevice final : public kernels::CpuBackend {
 public:
  explicit EmulatedDevice(const kernels::BackendOptions& o = {}) : CpuBackend(o) {}
  Device device() const override { return kEmulatedDevice; }
  std::string describe() const override {
    return "cuda:99, emulated: the CPU's kernels on memory called a GPU's";
  }
};

}  // namespace mmrt::test
