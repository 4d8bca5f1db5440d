// What the model reference tests share: running a reference script of tests/reference (or any
// command), reading a file's bytes, the largest deviation from a reference relative to its
// largest value, and the report line that prints it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mmrt::test {

// Runs `cmd` (a shell command line); its stdout. Fails the calling test on a non-zero exit.
inline std::string shell_out(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr) << cmd;
  if (!p) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << cmd;
  return out;
}

// Runs tests/reference/`script` with `args` (a shell tail, redirections allowed) under the
// reference Python; its stdout.
inline std::string run_ref(const std::string& script, const std::string& args) {
  return shell_out(std::string(MMRT_REF_PYTHON) + " " + MMRT_SOURCE_DIR + "/tests/reference/" +
                   script + " " + args);
}

inline std::vector<uint8_t> file_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The largest deviation of `got` from `want`, the largest |want| it is measured against, and the
// mean deviation (sum_abs over n values).
struct Diff {
  double max_abs = 0, max_ref = 0;
  double sum_abs = 0;
  int64_t n = 0;
  double rel() const { return max_abs / max_ref; }
  double mean_abs() const { return n ? sum_abs / static_cast<double>(n) : 0; }
};
inline Diff diff(const float* got, const float* want, int64_t n) {
  Diff d;
  d.n = n;
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::fabs(double(got[i]) - double(want[i]));
    d.max_ref = std::max<double>(d.max_ref, std::fabs(want[i]));
    d.max_abs = std::max(d.max_abs, e);
    d.sum_abs += e;
  }
  return d;
}
inline Diff diff(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return {1e30, 1};
  return diff(got.data<float>(), want.data<float>(), got.numel());
}
inline void report(const std::string& what, const Diff& d) {
  std::printf("[   INFO   ] %s: max rel error %.3g (abs %.3g of max |ref| %.3g)\n", what.c_str(),
              d.rel(), d.max_abs, d.max_ref);
}

// "1,2,3": ids or sizes as a reference script's argument.
template <typename T>
std::string csv(const std::vector<T>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

}  // namespace mmrt::test
