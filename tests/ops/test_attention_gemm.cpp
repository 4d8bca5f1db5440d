// The element-wise kernels of the encoders' GEMM attention (attention_gemm_avx512bf16.cpp)
// against double-precision arithmetic: the row softmax's probabilities, with its own fast exp,
// must round as bf16(exp(s - max)) does, and its sums must be the sums of what it wrote.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/convert.h"
#include "core/isa.h"
#include "kernels/cpu/attention_impl.h"

namespace mmrt {
namespace {

TEST(AttentionGemm, SoftmaxRoundsAsExactExpDoes) {
  if (!isa_supported(Isa::kAvx512Bf16)) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  constexpr int kRows = 40, kLen = 1000, kLenp = 1024;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 6.f);  // scores spread over ~2^-60 .. 1 after exp
  std::vector<float> s(size_t(kRows) * kLenp);
  for (auto& v : s) v = nd(rng);
  // Edge rows: a masked key (-inf), keys far below the max (exp underflows to zero).
  s[0] = -std::numeric_limits<float>::infinity();
  s[kLenp + 3] = 200.f;
  std::vector<uint16_t> p(s.size(), 0xffff);  // poisoned
  std::vector<float> sums(kRows, -1.f);
  kernels::detail::softmax_rows_bf16(s.data(), kRows, kLen, kLenp, p.data(), sums.data());

  int64_t differ = 0, n = 0;
  for (int r = 0; r < kRows; ++r) {
    const float* sr = s.data() + size_t(r) * kLenp;
    double mx = -INFINITY;
    for (int c = 0; c < kLen; ++c) mx = std::max(mx, double(sr[c]));
    double sum = 0;
    for (int c = 0; c < kLenp; ++c) {
      const uint16_t got = p[size_t(r) * kLenp + c];
      if (c >= kLen) {
        ASSERT_EQ(got, 0) << "row " << r << " padding key " << c;
        continue;
      }
      const double e = std::exp(double(sr[c]) - mx);
      const float gotf = bf16_to_f32_scalar(got);
      sum += gotf;
      // bf16 keeps 8 significant bits: rounding is within half a unit, 2^-8 of the value at
      // most, the exp's own error (< 3e-6) on top; below 2^-126 the conversion flushes to zero.
      if (e < 0x1p-126) {
        EXPECT_EQ(gotf, 0.f) << "row " << r << " key " << c;
        continue;
      }
      EXPECT_LE(std::abs(gotf / e - 1), 0x1p-8 + 4e-6) << "row " << r << " key " << c;
      differ += got != f32_to_bf16_scalar(float(e));
      ++n;
    }
    EXPECT_NEAR(sums[size_t(r)], sum, 1e-6 * sum) << "row " << r;
  }
  // Values that round the other way than bf16 of the exact exp: 13 of 39,000 here (0.03 %); an
  // exp off by 6e-5 at most (one coefficient 2.5e-4 off) gives 168 (0.43 %).
  EXPECT_LT(double(differ), 0.001 * double(n)) << differ << " of " << n;
  EXPECT_EQ(p[0], 0) << "a masked (-inf) score has probability zero";
}

}  // namespace
}  // namespace mmrt
