// Conversions checked bit-exact against PyTorch and numpy (tests/reference/convert_ref.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "core/convert.h"
#include "core/convert_impl.h"
#include "core/cpu.h"
#include "core/isa.h"

namespace fs = std::filesystem;
using namespace mmrt;

namespace {

template <typename T>
std::vector<T> read_bin(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f.good()) << p;
  f.seekg(0, std::ios::end);
  size_t n = static_cast<size_t>(f.tellg()) / sizeof(T);
  f.seekg(0);
  std::vector<T> v(n);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(T)));
  return v;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bool is_nan16(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}
bool is_nan_bf16(uint16_t h) {
  return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
}

// Inputs: every exponent with mantissas around every f16/bf16 rounding boundary, plus random bits.
std::vector<float> make_inputs() {
  std::vector<float> v;
  std::mt19937 rng(1234);
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t exp = 0; exp < 256; ++exp) {
      for (uint32_t m :
           {0u, 1u, 0x1000u, 0x0fffu, 0x1001u, 0x3000u, 0x2000u, 0x8000u, 0x7fffu, 0x8001u,
            0x18000u, 0x7fffffu, 0x7fe000u, 0x7ff000u, 0x400000u, 0x3fffffu}) {
        v.push_back(from_bits((sign << 31) | (exp << 23) | m));
      }
      for (int k = 0; k < 64; ++k)
        v.push_back(from_bits((sign << 31) | (exp << 23) | (rng() & 0x7fffff)));
    }
  }
  // Dense sweep of the f16 subnormal/normal boundary region and the overflow edge.
  for (float f = 5e-9f; f < 1e-4f; f *= 1.0003f) v.push_back(f);
  for (float f = 65000.f; f < 66000.f; f += 0.25f) v.push_back(f);
  for (int k = 0; k < 200000; ++k) v.push_back(from_bits(rng()));
  return v;
}

class ConvertTest : public ::testing::TestWithParam<const char*> {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("mmrt_convert_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    inputs_ = make_inputs();
    {
      std::ofstream f(dir_ / "in.bin", std::ios::binary);
      f.write(reinterpret_cast<const char*>(inputs_.data()),
              static_cast<std::streamsize>(inputs_.size() * 4));
    }
    std::string cmd = std::string(MMRT_REF_PYTHON) + " " + MMRT_SOURCE_DIR +
                      "/tests/reference/convert_ref.py " + (dir_ / "in.bin").string() + " " +
                      dir_.string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "reference script failed: " << cmd;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  // The variant under test, called through its table (the public functions use the best one).
  void SetUp() override {
    const auto isa = parse_isa(GetParam());
    ASSERT_TRUE(isa.has_value());
    fns_ = detail::convert_variants().exactly(*isa);
    if (!fns_) GTEST_SKIP() << GetParam() << " not supported on this CPU";
  }
  void f32_to_f16(const float* s, uint16_t* d, size_t n) const { fns_->f32_to_f16(s, d, n); }
  void f16_to_f32(const uint16_t* s, float* d, size_t n) const { fns_->f16_to_f32(s, d, n); }
  void f32_to_bf16(const float* s, uint16_t* d, size_t n) const { fns_->f32_to_bf16(s, d, n); }
  void bf16_to_f32(const uint16_t* s, float* d, size_t n) const { fns_->bf16_to_f32(s, d, n); }
  const detail::ConvertFns* fns_ = nullptr;
  static fs::path dir_;
  static std::vector<float> inputs_;
};
fs::path ConvertTest::dir_;
std::vector<float> ConvertTest::inputs_;

TEST_P(ConvertTest, F32ToF16MatchesTorchAndNumpy) {
  auto ref_t = read_bin<uint16_t>(dir_ / "f16_torch.bin");
  auto ref_n = read_bin<uint16_t>(dir_ / "f16_numpy.bin");
  ASSERT_EQ(ref_t.size(), inputs_.size());
  std::vector<uint16_t> got(inputs_.size());
  f32_to_f16(inputs_.data(), got.data(), got.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (is_nan16(ref_t[i])) {  // NaN payloads are unspecified; NaN-ness and sign are not
      EXPECT_TRUE(is_nan16(got[i])) << "input bits " << std::hex << bits(inputs_[i]);
      continue;
    }
    if (got[i] != ref_t[i] || got[i] != ref_n[i]) {
      if (++bad < 10)
        ADD_FAILURE() << "input 0x" << std::hex << bits(inputs_[i]) << ": got 0x" << got[i]
                      << " torch 0x" << ref_t[i] << " numpy 0x" << ref_n[i];
    }
  }
  EXPECT_EQ(bad, 0u);
}

TEST_P(ConvertTest, F32ToBF16MatchesTorch) {
  auto ref = read_bin<uint16_t>(dir_ / "bf16_torch.bin");
  ASSERT_EQ(ref.size(), inputs_.size());
  std::vector<uint16_t> got(inputs_.size());
  f32_to_bf16(inputs_.data(), got.data(), got.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (is_nan_bf16(ref[i])) {
      EXPECT_TRUE(is_nan_bf16(got[i]));
      continue;
    }
    if (got[i] != ref[i] && ++bad < 10)
      ADD_FAILURE() << "input 0x" << std::hex << bits(inputs_[i]) << ": got 0x" << got[i]
                    << " torch 0x" << ref[i];
  }
  EXPECT_EQ(bad, 0u);
}

TEST_P(ConvertTest, AllF16AndBF16PatternsToF32) {
  auto ref16 = read_bin<uint32_t>(dir_ / "f16_to_f32.bin");
  auto refbf = read_bin<uint32_t>(dir_ / "bf16_to_f32.bin");
  ASSERT_EQ(ref16.size(), 65536u);
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> got(65536);
  f16_to_f32(all.data(), got.data(), all.size());
  for (uint32_t i = 0; i < 65536; ++i) {
    if (is_nan16(static_cast<uint16_t>(i))) {
      EXPECT_TRUE(std::isnan(got[i]));
      continue;
    }
    ASSERT_EQ(bits(got[i]), ref16[i]) << "f16 0x" << std::hex << i;
  }
  bf16_to_f32(all.data(), got.data(), all.size());
  for (uint32_t i = 0; i < 65536; ++i)
    ASSERT_EQ(bits(got[i]), refbf[i]) << "bf16 0x" << std::hex << i;
}

INSTANTIATE_TEST_SUITE_P(Isa, ConvertTest, ::testing::Values("scalar", "avx2", "avx512"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
