// Parametrised fixture running a test once per ISA variant of one kernel family; variants the
// CPU lacks are skipped, and the best variant is restored afterwards.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace mmrt::test {

inline const char* const kIsas[] = {"scalar", "avx2", "avx512"};

template <bool (*Force)(const char*)>
class IsaFixture : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!Force(GetParam())) GTEST_SKIP() << GetParam() << " not supported on this CPU";
  }
  void TearDown() override {
    if (!Force("avx512") && !Force("avx2")) Force("scalar");
  }
};

inline std::string isa_name(const ::testing::TestParamInfo<const char*>& info) {
  return info.param;
}

}  // namespace mmrt::test
