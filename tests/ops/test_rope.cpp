// Rotary embeddings vs an HF-style rotate_half implementation in PyTorch, every ISA variant.
// Tolerance |err| <= 1e-5 + 1e-5 * |ref| (angles and cos/sin are fp32 on both sides).
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "isa_fixture.h"
#include "kernels/rope.h"
#include "ref_suite.h"

using namespace mmrt;
using namespace mmrt::kernels;
using namespace mmrt::test;

namespace {

constexpr double kAtol = 1e-5, kRtol = 1e-5;

RefCase rope_case(const std::string& name, const std::string& kind, int64_t hd, double theta,
                  int64_t n, int64_t heads, std::vector<int32_t> pos, int64_t comps,
                  uint32_t seed) {
  RefCase c;
  c.name = name;
  c.op = "rope";
  c.params = {{"kind", kind}, {"head_dim", hd}, {"theta", theta}, {"section", {16, 24, 24}}};
  c.inputs["x"] = f32_array({n, heads, hd}, randn(size_t(n * heads * hd), seed, 2.0f));
  c.inputs["pos"] = i32_array({comps, n}, std::move(pos));
  return c;
}

[[maybe_unused]] const bool kReg = register_cases([](RefSuite& s) {
  s.add(rope_case("rope_plain", "plain", 128, 1e6, 37, 3, randint(37, 1, 0, 4000), 1, 2));
  s.add(rope_case("rope_mrope", "mrope", 128, 1e6, 41, 2, randint(3 * 41, 3, 0, 2000), 3, 4));
  s.add(rope_case("rope_vision", "vision", 80, 1e4, 50, 4, randint(2 * 50, 5, 0, 64), 2, 6));
  for (auto [dim, theta] : {std::pair{128, 1e6}, std::pair{40, 1e4}, std::pair{64, 1e4}}) {
    RefCase c;
    c.name = "inv_freq_" + std::to_string(dim) + "_" + std::to_string(int(theta));
    c.op = "inv_freq";
    c.params = {{"dim", dim}, {"theta", theta}};
    s.add(std::move(c));
  }
});

TEST(RopeTable, InvFreqMatchesHf) {
  RopeTable t = make_rope_table(128, 1e6);
  const RefCase& c = RefSuite::get().at("inv_freq_128_1000000");
  ASSERT_EQ(t.inv_freq.size(), 64u);
  expect_close(t.inv_freq.data(), c.out.f.data(), 64, 0.0, 2.4e-7, "inv_freq 128");  // 1 ulp
  RopeTable v = make_vision_rope_table(80, 1e4);
  const RefCase& cv = RefSuite::get().at("inv_freq_40_10000");
  ASSERT_EQ(v.inv_freq.size(), 40u);
  expect_close(v.inv_freq.data(), cv.out.f.data(), 20, 0.0, 2.4e-7, "vision row freqs");
  expect_close(v.inv_freq.data() + 20, cv.out.f.data(), 20, 0.0, 2.4e-7, "vision col freqs");
  RopeTable l = make_rope_table(64, 1e4);
  const RefCase& cl = RefSuite::get().at("inv_freq_64_10000");
  expect_close(l.inv_freq.data(), cl.out.f.data(), 32, 0.0, 2.4e-7, "inv_freq 64");
}

TEST(RopeTable, ComponentsFollowSpecs) {
  const int32_t sec[] = {16, 24, 24};
  RopeTable m = make_mrope_table(128, 1e6, sec);
  EXPECT_EQ(m.n_components, 3);
  for (int j = 0; j < 64; ++j) EXPECT_EQ(m.component[j], j < 16 ? 0 : j < 40 ? 1 : 2) << j;
  RopeTable v = make_vision_rope_table(80);
  EXPECT_EQ(v.n_components, 2);
  for (int j = 0; j < 40; ++j) EXPECT_EQ(v.component[j], j < 20 ? 0 : 1) << j;
  const int32_t bad[] = {16, 24, 23};
  EXPECT_THROW(make_mrope_table(128, 1e6, bad), InvalidArgument);
  EXPECT_THROW(make_rope_table(127, 1e6), InvalidArgument);
  EXPECT_THROW(make_vision_rope_table(78), InvalidArgument);
}

// Every test below runs on every backend (isa_fixture.h): x in the backend's memory, the
// positions and angles host memory (step metadata).
class RopeDevice : public DeviceFixture {
 protected:
  RopeDevice() : DeviceFixture({Op::kRopeAngles, Op::kApplyRope}) {}
  // apply_rope(table form) on a device copy of x; the result on the host.
  std::vector<float> rotated(const RopeTable& t, const int32_t* pos, int64_t n,
                             const std::vector<float>& x, int64_t heads, int64_t row_stride = 0) {
    DeviceBuf d(be(), x);
    apply_rope(be(), t, pos, n, d.get(), heads, row_stride);
    return d.host();
  }
  void check_case(const char* name, const RopeTable& table) {
    const RefCase& c = RefSuite::get().at(name);
    const Array& x = c.inputs.at("x");
    const Array& pos = c.inputs.at("pos");
    const std::vector<float> y = rotated(table, pos.i.data(), x.shape[0], x.f, x.shape[1]);
    expect_close(y.data(), c.out.f.data(), y.size(), kAtol, kRtol, name);
  }
};

TEST_P(RopeDevice, PlainMatchesHf) {
  check_case("rope_plain", make_rope_table(128, 1e6));
}

TEST_P(RopeDevice, MropeMatchesHf) {
  const int32_t sec[] = {16, 24, 24};
  check_case("rope_mrope", make_mrope_table(128, 1e6, sec));
}

TEST_P(RopeDevice, VisionMatchesHf) {
  check_case("rope_vision", make_vision_rope_table(80, 1e4));
}

TEST_P(RopeDevice, StridedRowsInsideFusedQkv) {
  // q (3 heads) rotated inside rows of [q | k | v] with 3 + 1 + 1 heads; k and v untouched.
  const RefCase& c = RefSuite::get().at("rope_plain");
  const Array& x = c.inputs.at("x");
  const Array& pos = c.inputs.at("pos");
  const int64_t n = x.shape[0], hd = 128, q_row = 3 * hd, stride = 5 * hd;
  std::vector<float> qkv = randn(size_t(n * stride), 77);
  const std::vector<float> orig = qkv;
  for (int64_t t = 0; t < n; ++t)
    std::copy(x.f.begin() + t * q_row, x.f.begin() + (t + 1) * q_row, qkv.begin() + t * stride);
  qkv = rotated(make_rope_table(128, 1e6), pos.i.data(), n, qkv, 3, stride);
  for (int64_t t = 0; t < n; ++t) {
    expect_close(qkv.data() + t * stride, c.out.f.data() + t * q_row, size_t(q_row), kAtol, kRtol,
                 "strided q");
    for (int64_t i = q_row; i < stride; ++i)
      ASSERT_EQ(qkv[size_t(t * stride + i)], orig[size_t(t * stride + i)]);
  }
}

TEST_P(RopeDevice, MropeWithEqualRowsIsPlainRope) {
  const int32_t sec[] = {16, 24, 24};
  const int64_t n = 19;
  auto p = randint(size_t(n), 9, 0, 30000);
  std::vector<int32_t> p3;
  for (int c = 0; c < 3; ++c) p3.insert(p3.end(), p.begin(), p.end());
  auto x = randn(size_t(n * 2 * 128), 10);
  EXPECT_EQ(rotated(make_rope_table(128, 1e6), p.data(), n, x, 2),
            rotated(make_mrope_table(128, 1e6, sec), p3.data(), n, x, 2));
}

// Partial rotary (Persimmon / Fuyu: the first rotary_dim dims of each head rotated, the rest
// passed through): each head's first 64 of 128 dims equal plain RoPE of a 64-dim table on the
// HF-checked kernel, computed head by head; the other 64 are untouched.
TEST_P(RopeDevice, PartialRotaryRotatesTheLeadingDimsOnly) {
  const int64_t n = 23, heads = 3, hd = 128, rot = 64;
  auto p = randint(size_t(n), 11, 0, 30000);
  const std::vector<float> x = randn(size_t(n * heads * hd), 12);
  const RopeTable table = make_rope_table(static_cast<int32_t>(rot), 1e4);
  DeviceBuf gd(be(), x);
  apply_rope(be(), rope_angles(be(), table, p.data(), n), gd.get(), heads, 0, hd);
  const std::vector<float> got = gd.host();
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<float> lead(size_t(n * rot));  // [n, rot]: this head's rotated part alone
    for (int64_t t = 0; t < n; ++t)
      std::copy_n(x.begin() + (t * heads + h) * hd, rot, lead.begin() + t * rot);
    lead = rotated(table, p.data(), n, lead, 1);
    for (int64_t t = 0; t < n; ++t) {
      const float* g = got.data() + (t * heads + h) * hd;
      for (int64_t i = 0; i < rot; ++i) ASSERT_EQ(g[i], lead[size_t(t * rot + i)]) << t << " " << i;
      for (int64_t i = rot; i < hd; ++i) ASSERT_EQ(g[i], x[size_t((t * heads + h) * hd + i)]);
    }
  }
  EXPECT_THROW(apply_rope(be(), rope_angles(be(), table, p.data(), n), gd.get(), heads, 0, 32),
               InvalidArgument);  // heads narrower than the rotated dims
}

INSTANTIATE_TEST_SUITE_P(Device, RopeDevice, ::testing::ValuesIn(kDevices), isa_param_name);

}  // namespace
