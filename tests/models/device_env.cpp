// The model suites run once per device (test_model.h): this environment skips the whole run, with
// the reason, where the chosen device is absent from this machine or its backend lacks an op a
// model family computes with. A skip is reported by ctest as "Skipped", never as a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/registry.h"
#include "models/registry.h"
#include "test_model.h"

namespace mmrt::test {
namespace {

class DeviceEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const Device d = test_device();
    if (const std::string why = emulated_device() ? "" : kernels::device_unavailable(d);
        !why.empty())
      GTEST_SKIP() << "model tests skipped on " << device_str(d) << ": " << why;
    std::vector<kernels::Op> ops;
    for (const models::ModelFamily* f : models::families())
      ops.insert(ops.end(), f->ops.begin(), f->ops.end());
    std::sort(ops.begin(), ops.end());
    ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
    std::string lacking;
    for (kernels::Op op : test_backend().missing(ops))
      lacking += std::string(lacking.empty() ? "" : ", ") + kernels::op_name(op);
    if (!lacking.empty())
      GTEST_SKIP() << "model tests skipped on " << device_str(d) << ": its backend lacks "
                   << lacking;
    std::printf("[   INFO   ] model tests on %s (%s)\n", device_str(d).c_str(),
                test_backend().describe().c_str());
  }
};

[[maybe_unused]] ::testing::Environment* const kDeviceEnvironment =
    ::testing::AddGlobalTestEnvironment(new DeviceEnvironment);

}  // namespace
}  // namespace mmrt::test
