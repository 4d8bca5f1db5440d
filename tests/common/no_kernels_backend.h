// A backend of another device with host memory and no kernels at all: what a new device is
// before its first op (tests of the missing-op errors and of refusal at load).
#pragma once

#include <cstring>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "kernels/backend.h"

namespace mmrt::test {

class NoKernelsBackend : public kernels::Backend {
 public:
  explicit NoKernelsBackend(int32_t cuda_index = 0)
      : Backend(kernels::OpTables{}), index_(cuda_index) {}
  Device device() const override { return {.kind = DeviceKind::kCuda, .index = index_}; }
  std::string describe() const override { return "no kernels"; }
  MemoryInfo memory() const override { return {}; }
  double measure_read_bandwidth_gbs(size_t, int) const override { return 0; }
  std::shared_ptr<void> allocate(size_t bytes, bool zero) const override {
    return aligned_alloc_shared(bytes, zero);
  }
  std::shared_ptr<void> allocate_staging(size_t bytes) const override {
    return aligned_alloc_shared(bytes);
  }

 protected:
  void copy_bytes(void* dst, const void* src, size_t bytes, CopyKind) const override {
    std::memcpy(dst, src, bytes);
  }

 private:
  int32_t index_;
};

}  // namespace mmrt::test
