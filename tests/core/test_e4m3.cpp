// FP8 E4M3 against the format's definition, independently of the bit manipulation: every code's
// value computed from sign, exponent and mantissa in double, and the encoder against a brute-force
// search for the nearest code (ties to the even mantissa) over finite values, subnormals, halfway
// points and one ulp either side, saturation and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/convert.h"

using namespace mmrt;

namespace {

// Code c's value from the definition (sign, 4 exponent bits with bias 7, 3 mantissa bits).
double definition(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return s ? -mag : mag;
}

// The nearest finite code to x by search (ties: the even mantissa), saturating past 448.
uint8_t nearest(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xff : 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(x));
  uint8_t best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c < 0x7f; ++c) {  // the positive finite codes, increasing
    const double d = std::fabs(definition(static_cast<uint8_t>(c)) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) best = static_cast<uint8_t>(c), best_d = d;
  }
  if (a >= 448.0) best = 0x7e;
  return sign | best;
}

TEST(E4m3, EveryCodeDecodesToItsDefinition) {
  for (int c = 0; c < 256; ++c) {
    const double want = definition(static_cast<uint8_t>(c));
    const float got = e4m3_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
    EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << "code " << c;
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), kE4m3Max);
}

TEST(E4m3, EncodesToTheNearestCodeTiesToEven) {
  std::vector<float> xs;
  for (int c = 0; c < 0x7f; ++c) {  // each value, the midpoints to the next, and neighbours
    const float v = e4m3_to_f32(static_cast<uint8_t>(c));
    const float next = c + 1 < 0x7f ? e4m3_to_f32(static_cast<uint8_t>(c + 1)) : 464.0f;
    const float mid = static_cast<float>((static_cast<double>(v) + next) / 2);
    for (float x : {v, mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f),
                    std::nextafter(v, 1e9f), std::nextafter(v, 0.f)})
      xs.push_back(x), xs.push_back(-x);
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> lg(-14.f, 10.f);
  for (int i = 0; i < 100000; ++i) {
    const float x = std::exp2(lg(rng));
    xs.push_back(rng() & 1 ? x : -x);
  }
  for (float x : {0.f, -0.f, 448.f, 449.f, 464.f, 1e6f, -1e30f,
                  std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()})
    xs.push_back(x);
  for (float x : xs) ASSERT_EQ(f32_to_e4m3(x), nearest(x)) << x;
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
}

}  // namespace
