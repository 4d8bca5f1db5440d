// Parametrised fixtures running a test once per backend (CTranslate2's device matrix):
//   DeviceFixture: every CPU kernel variant ("cpu-scalar", "cpu-avx2", "cpu-avx512") and every
//     other device of the registry ("cuda"). A test written against it keeps its data in the
//     backend's memory (DeviceBuf, Backend::upload), so the same test checks every device's
//     kernels. A device this build lacks or this machine does not have, a CPU variant this CPU
//     lacks, or an op the device has no kernel for (MMRT_REQUIRE_OPS) reports the test skipped
//     with the reason; none of them fails.
//   IsaFixture: the CPU variants only, for tests that still read and write host memory directly.
// Each test gets its own backend; nothing global is forced, so tests cannot leak a variant into
// each other. Outside the fixtures, be() is a default CPU backend.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/isa.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/registry.h"

namespace mmrt::test {

inline const char* const kIsas[] = {"scalar", "avx2", "avx512"};
inline const char* const kDevices[] = {"cpu-scalar", "cpu-avx2", "cpu-avx512", "cuda"};

// The best variant, every CPU (tests that are not per variant).
inline const kernels::CpuBackend& be() {
  static const kernels::CpuBackend b;
  return b;
}

// Why `device` cannot run here ("" when it can): no backend in this build, or none present.
inline std::string device_unavailable(Device device) {
  for (const kernels::BackendEntry& e : kernels::backend_entries()) {
    if (e.kind != device.kind) continue;
    const kernels::DeviceDiscovery d = e.discover();
    for (const kernels::DeviceInfo& x : d.devices)
      if (x.device == device) return "";
    return device_str(device) + ": " +
           (d.devices.empty() ? d.none_because : std::string("no such device"));
  }
  return std::string("this build has no ") + device_kind_name(device.kind) + " backend";
}

class DeviceFixture : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string p = GetParam();
    if (p.starts_with("cpu-")) {
      const auto isa = parse_isa(p.substr(4));
      ASSERT_TRUE(isa.has_value()) << p;
      if (!isa_supported(*isa)) GTEST_SKIP() << p << ": this CPU lacks the variant";
      be_ = std::make_unique<kernels::CpuBackend>(kernels::BackendOptions{.max_isa = *isa});
      return;
    }
    const Device d = parse_device(p);
    if (const std::string why = device_unavailable(d); !why.empty()) GTEST_SKIP() << why;
    be_ = kernels::create_backend(d);
  }
  const kernels::Backend& be() const { return *be_; }
  // The ops of `ops` the backend lacks, as a message ("" when none).
  std::string lacking(std::initializer_list<kernels::Op> ops) const {
    std::string m;
    for (kernels::Op op : be_->missing(std::span<const kernels::Op>(ops.begin(), ops.size())))
      m += (m.empty() ? "" : ", ") + std::string(kernels::op_name(op));
    return m.empty() ? "" : device_str(be_->device()) + " has no kernel for " + m;
  }

 private:
  std::unique_ptr<kernels::Backend> be_;
};

// Skips the running DeviceFixture test when its backend lacks one of the ops.
#define MMRT_REQUIRE_OPS(...)                                                                 \
  do {                                                                                        \
    if (const std::string why_ = lacking({__VA_ARGS__}); !why_.empty()) GTEST_SKIP() << why_; \
  } while (0)

// f32 data in a backend's memory: uploaded from the host, or poisoned with NaN so that an
// output the kernel does not write shows. host() downloads it.
class DeviceBuf {
 public:
  DeviceBuf(const kernels::Backend& be, const std::vector<float>& host)
      : be_(&be), n_(host.size()) {
    mem_ = be.allocate(std::max<size_t>(n_, 1) * sizeof(float));
    be.copy_to_device(mem_.get(), host.data(), n_ * sizeof(float));
  }
  DeviceBuf(const kernels::Backend& be, size_t n)
      : DeviceBuf(be, std::vector<float>(n, std::numeric_limits<float>::quiet_NaN())) {}
  float* get() { return static_cast<float*>(mem_.get()); }
  const float* get() const { return static_cast<const float*>(mem_.get()); }
  size_t size() const { return n_; }
  std::vector<float> host() const {
    std::vector<float> out(n_);
    be_->copy_to_host(out.data(), mem_.get(), n_ * sizeof(float));
    return out;
  }

 private:
  const kernels::Backend* be_;
  size_t n_;
  std::shared_ptr<void> mem_;
};

class IsaFixture : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const auto isa = parse_isa(GetParam());
    ASSERT_TRUE(isa.has_value()) << GetParam();
    if (!isa_supported(*isa)) GTEST_SKIP() << GetParam() << " not supported on this CPU";
    be_ = std::make_unique<kernels::CpuBackend>(kernels::BackendOptions{.max_isa = *isa});
  }
  const kernels::CpuBackend& be() const { return *be_; }

 private:
  std::unique_ptr<kernels::CpuBackend> be_;
};

inline std::string isa_param_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string s = info.param;
  for (char& c : s)
    if (c == '-' || c == ':') c = '_';
  return s;
}

}  // namespace mmrt::test
