// Test support for the kernel suite: cases are declared by the test files (inputs generated
// here from fixed seeds), written to a temporary folder once, computed by PyTorch in one run
// of tests/reference/ops_ref.py, and read back for comparison.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace mmrt::test {

struct Array {
  std::string dtype = "f32";  // "f32", "i32" or "bf16" (raw bits)
  std::vector<int64_t> shape;
  std::vector<float> f;
  std::vector<int32_t> i;
  std::vector<uint16_t> h;
};

Array f32_array(std::vector<int64_t> shape, std::vector<float> data);
Array i32_array(std::vector<int64_t> shape, std::vector<int32_t> data);
Array bf16_array(std::vector<int64_t> shape, std::vector<uint16_t> data);

struct RefCase {
  std::string name, op;
  nlohmann::json params = nlohmann::json::object();
  std::map<std::string, Array> inputs;
  Array out;  // filled from the reference (f32, or i32 for argmax)
};

class RefSuite {
 public:
  // Runs every registered case builder, then the reference script, once per process.
  static RefSuite& get();
  const RefCase& at(const std::string& name) const;
  void add(RefCase c);

 private:
  std::map<std::string, RefCase> cases_;
};

// Registers a function adding cases; use at namespace scope:
//   const bool kReg = mmrt::test::register_cases([](RefSuite& s) { ... });
bool register_cases(std::function<void(RefSuite&)> builder);

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f);
std::vector<int32_t> randint(size_t n, uint32_t seed, int32_t lo, int32_t hi);  // [lo, hi)

// Compares got vs ref elementwise: |got - ref| <= atol + rtol * |ref| (NaN must match NaN).
// Reports the first mismatches and the largest error; returns the largest absolute error.
double expect_close(const float* got, const float* ref, size_t n, double atol, double rtol,
                    const std::string& what);

}  // namespace mmrt::test
