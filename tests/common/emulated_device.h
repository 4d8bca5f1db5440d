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

class EmulatedDevice : public kernels::CpuBackend {
 public:
  // `memory`: what memory() reports (a GPU's free and total bytes); unset: the host's.
  explicit EmulatedDevice(const kernels::BackendOptions& o = {}, MemoryInfo memory = {})
      : CpuBackend(o), memory_(memory) {}
  Device device() const override { return kEmulatedDevice; }
  MemoryInfo memory() const override { return memory_.total > 0 ? memory_ : CpuBackend::memory(); }
  std::string describe() const override {
    return "cuda:99, emulated: the CPU's kernels on memory called a GPU's";
  }

 private:
  MemoryInfo memory_;
};

}  // namespace mmrt::test
