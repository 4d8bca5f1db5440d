// Parametrised fixture running a test once per kernel variant: each test gets its own Backend
// capped at that variant (variants the CPU lacks are skipped). Nothing global is forced, so
// tests cannot leak a variant into each other. Outside the fixture, be() is a default backend.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/isa.h"
#include "kernels/backend.h"

namespace mmrt::test {

inline const char* const kIsas[] = {"scalar", "avx2", "avx512"};

// The best variant, every CPU (tests that are not per variant).
inline const kernels::Backend& be() {
  static const kernels::Backend b;
  return b;
}

class IsaFixture : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const auto isa = parse_isa(GetParam());
    ASSERT_TRUE(isa.has_value()) << GetParam();
    if (!isa_supported(*isa)) GTEST_SKIP() << GetParam() << " not supported on this CPU";
    be_ = std::make_unique<kernels::Backend>(kernels::BackendOptions{.max_isa = *isa});
  }
  const kernels::Backend& be() const { return *be_; }

 private:
  std::unique_ptr<kernels::Backend> be_;
};

inline std::string isa_param_name(const ::testing::TestParamInfo<const char*>& info) {
  return info.param;
}

}  // namespace mmrt::test
