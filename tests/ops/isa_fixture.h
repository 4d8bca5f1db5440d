// Parametrised fixtures running a test once per backend (CTranslate2's device matrix):
//   DeviceFixture: every CPU kernel variant ("cpu-scalar", "cpu-avx2", "cpu-avx512") and every
//     other device of the registry ("cuda"). A test written against it keeps its data in the
//     backend's memory (DeviceBuf, Backend::upload), so the same test checks every device's
//     kernels. A device this build lacks or this machine does not have, a CPU variant this CPU
//     lacks, or an op the device has no kernel for (the fixture's required ops) reports the test
//     skipped with the reason; none of them fails.
//   IsaFixture: the CPU variants only, for tests that still read and write host memory directly.
// Each test gets its own backend; nothing global is forced, so tests cannot leak a variant into
// each other. Outside the fixtures, be() is a default CPU backend.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../common/emulated_device.h"
#include "core/device.h"
#include "core/isa.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/registry.h"

namespace mmrt::test {

inline const char* const kIsas[] = {"scalar", "avx2", "avx512"};
// "emulated": the CPU's kernels on memory called a GPU's (../common/emulated_device.h), so a test
// that hands an op host memory fails here before it fails on a GPU.
inline const char* const kDevices[] = {"cpu-scalar", "cpu-avx2", "cpu-avx512", "emulated", "cuda"};

// The best variant, every CPU (tests that are not per variant).
inline const kernels::CpuBackend& be() {
  static const kernels::CpuBackend b;
  return b;
}

// A backend parameter ("cpu-avx2", "cuda"): the CPU variant it caps at, or the device; `skip`
// says why it cannot run here (a variant this CPU lacks, a device this build or machine lacks).
struct BackendParam {
  std::optional<Isa> cpu_isa;  // set for "cpu-<variant>"
  bool emulated = false;       // "emulated"
  Device device;
  std::string skip;
};
inline BackendParam parse_backend_param(const std::string& p) {
  BackendParam b;
  if (p == "emulated") {
    b.emulated = true;
    b.device = kEmulatedDevice;
    return b;
  }
  if (p.starts_with("cpu-")) {
    b.cpu_isa = parse_isa(p.substr(4));
    if (!b.cpu_isa) throw InvalidArgument("unknown CPU variant in '" + p + "'");
    if (!isa_supported(*b.cpu_isa)) b.skip = p + ": this CPU lacks the variant";
    return b;
  }
  b.device = parse_device(p);
  if (const std::string why = kernels::device_unavailable(b.device); !why.empty())
    b.skip = device_str(b.device) + ": " + why;
  return b;
}
// The backend for a parameter that can run here (the CPU: `threads`, capped at the variant).
inline std::unique_ptr<kernels::Backend> backend_for(const BackendParam& b, int threads = 0) {
  if (b.emulated)
    return std::make_unique<EmulatedDevice>(kernels::BackendOptions{.threads = threads});
  if (b.cpu_isa)
    return std::make_unique<kernels::CpuBackend>(
        kernels::BackendOptions{.threads = threads, .max_isa = *b.cpu_isa});
  return kernels::create_backend(b.device);
}

// Each test runs on its parameter's backend; `required` are the ops it needs (a backend lacking
// one reports the test skipped, naming them).
class DeviceFixture : public ::testing::TestWithParam<const char*> {
 protected:
  explicit DeviceFixture(std::initializer_list<kernels::Op> required = {}) : required_(required) {}
  void SetUp() override {
    const BackendParam b = parse_backend_param(GetParam());
    if (!b.skip.empty()) GTEST_SKIP() << b.skip;
    be_ = backend_for(b);
    if (const std::string why = lacking(required_); !why.empty()) GTEST_SKIP() << why;
  }
  const kernels::Backend& be() const { return *be_; }
  // The ops of `ops` the backend lacks, as a message ("" when none).
  std::string lacking(std::span<const kernels::Op> ops) const {
    std::string m;
    for (kernels::Op op : be_->missing(ops))
      m += (m.empty() ? "" : ", ") + std::string(kernels::op_name(op));
    return m.empty() ? "" : device_str(be_->device()) + " has no kernel for " + m;
  }
  std::string lacking(std::initializer_list<kernels::Op> ops) const {
    return lacking(std::span<const kernels::Op>(ops.begin(), ops.size()));
  }

 private:
  std::vector<kernels::Op> required_;
  std::unique_ptr<kernels::Backend> be_;
};

// Skips the running DeviceFixture test when its backend lacks one of the ops (for tests of one
// fixture that need different ops; the fixture's own list is its constructor's).
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
