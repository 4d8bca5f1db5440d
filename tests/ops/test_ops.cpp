// Element-wise kernels vs PyTorch (tests/reference/ops_ref.py), on every backend: each CPU
// variant and each device (isa_fixture.h).
// Tolerances: f32 ops |err| <= 1e-5 + 1e-5 * |ref| unless stated otherwise.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/convert.h"
#include "core/error.h"
#include "core/tensor.h"
#include "isa_fixture.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/ops.h"
#include "ref_suite.h"

using namespace mmrt;
using namespace mmrt::kernels;
using namespace mmrt::test;

namespace {

constexpr double kAtol = 1e-5, kRtol = 1e-5;

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  f32_to_bf16(v.data(), h.data(), v.size());
  return h;
}

Tensor tensor_of(const Array& a) {
  Shape s(a.shape.begin(), a.shape.end());
  if (a.dtype == "f32") {
    Tensor t = Tensor::empty(DType::kF32, s);
    std::copy(a.f.begin(), a.f.end(), t.data<float>());
    return t;
  }
  Tensor t = Tensor::empty(DType::kBF16, s);
  std::copy(a.h.begin(), a.h.end(), static_cast<uint16_t*>(t.raw()));
  return t;
}

// Norm shapes: d = 1536 (Qwen2-VL hidden), 203 (vector tails), 80 and 1283 for LayerNorm.
const bool kReg = register_cases([](RefSuite& s) {
  uint32_t seed = 100;
  for (int64_t d : {1536, 203}) {
    for (bool bf16 : {false, true}) {
      RefCase c;
      c.name = "rms_norm_" + std::to_string(d) + (bf16 ? "_bf16" : "_f32");
      c.op = "rms_norm";
      c.params = {{"eps", 1e-6}};
      auto x = randn(size_t(6 * d), seed++, 2.0f);
      x[0] = 0.0f;
      c.inputs["x"] = f32_array({6, d}, x);
      auto w = randn(size_t(d), seed++, 1.0f);
      c.inputs["w"] = bf16 ? bf16_array({d}, to_bf16(w)) : f32_array({d}, w);
      s.add(std::move(c));
    }
  }
  for (int64_t d : {80, 1283}) {
    RefCase c;
    c.name = "layer_norm_" + std::to_string(d);
    c.op = "layer_norm";
    c.params = {{"eps", 1e-6}};
    auto x = randn(size_t(5 * d), seed++, 3.0f);
    for (auto& v : x) v += 1.5f;  // a non-zero mean
    c.inputs["x"] = f32_array({5, d}, x);
    c.inputs["w"] = f32_array({d}, randn(size_t(d), seed++));
    c.inputs["b"] = f32_array({d}, randn(size_t(d), seed++));
    s.add(std::move(c));
  }
  {
    RefCase c;
    c.name = "silu_mul";
    c.op = "silu_mul";
    c.inputs["x"] = f32_array({7, 2 * 333}, randn(7 * 2 * 333, seed++, 4.0f));
    s.add(std::move(c));
  }
  std::vector<float> act;
  for (int i = 0; i <= 4000; ++i) act.push_back(-20.0f + 40.0f * float(i) / 4000.0f);
  for (float v : randn(3001, seed++, 3.0f)) act.push_back(v);
  for (const char* op : {"gelu_erf", "quick_gelu"}) {
    RefCase c;
    c.name = op;
    c.op = op;
    c.inputs["x"] = f32_array({int64_t(act.size())}, act);
    s.add(std::move(c));
  }
  {
    RefCase c;
    c.name = "softmax";
    c.op = "softmax";
    auto x = randn(9 * 1000, seed++, 8.0f);
    for (int j = 0; j < 1000; j += 3)
      x[size_t(2 * 1000 + j)] = -std::numeric_limits<float>::infinity();
    c.inputs["x"] = f32_array({9, 1000}, x);
    s.add(std::move(c));
  }
  for (bool bf16 : {false, true}) {
    RefCase c;
    c.name = bf16 ? "embedding_bf16" : "embedding_f32";
    c.op = "embedding";
    auto t = randn(50 * 72, seed++);
    c.inputs["table"] = bf16 ? bf16_array({50, 72}, to_bf16(t)) : f32_array({50, 72}, t);
    c.inputs["ids"] = i32_array({11}, {0, 49, 3, 3, 17, 25, 48, 1, 0, 33, 12});
    s.add(std::move(c));
  }
  {
    RefCase c;
    c.name = "argmax";
    c.op = "argmax";
    auto x = randn(151936, seed++, 5.0f);
    x[70001] = 40.0f;  // ties: the first index wins
    x[90000] = 40.0f;
    c.inputs["x"] = f32_array({151936}, x);
    s.add(std::move(c));
  }
});

// Every test below runs on every backend (isa_fixture.h), its data in the backend's memory.
class OpsDevice : public DeviceFixture {};

TEST_P(OpsDevice, RmsNormMatchesHf) {
  MMRT_REQUIRE_OPS(Op::kRmsNorm);
  for (const char* name :
       {"rms_norm_1536_f32", "rms_norm_1536_bf16", "rms_norm_203_f32", "rms_norm_203_bf16"}) {
    const RefCase& c = RefSuite::get().at(name);
    const Array& x = c.inputs.at("x");
    const int64_t n = x.shape[0], d = x.shape[1];
    const Tensor w = be().upload(tensor_of(c.inputs.at("w")));
    const DeviceBuf xd(be(), x.f);
    DeviceBuf y(be(), x.f.size());
    rms_norm(be(), xd.get(), w, 1e-6f, y.get(), n, d);
    const std::vector<float> yh = y.host();
    expect_close(yh.data(), c.out.f.data(), yh.size(), kAtol, kRtol, name);
    DeviceBuf inplace(be(), x.f);  // in place gives the same result
    rms_norm(be(), inplace.get(), w, 1e-6f, inplace.get(), n, d);
    EXPECT_EQ(inplace.host(), yh) << name;
  }
}

TEST_P(OpsDevice, LayerNormMatchesTorch) {
  MMRT_REQUIRE_OPS(Op::kLayerNorm);
  for (const char* name : {"layer_norm_80", "layer_norm_1283"}) {
    const RefCase& c = RefSuite::get().at(name);
    const Array& x = c.inputs.at("x");
    const DeviceBuf xd(be(), x.f);
    DeviceBuf y(be(), x.f.size());
    layer_norm(be(), xd.get(), be().upload(tensor_of(c.inputs.at("w"))),
               be().upload(tensor_of(c.inputs.at("b"))), 1e-6f, y.get(), x.shape[0], x.shape[1]);
    const std::vector<float> yh = y.host();
    expect_close(yh.data(), c.out.f.data(), yh.size(), kAtol, kRtol, name);
  }
}

TEST_P(OpsDevice, SiluMulFusedAndSeparate) {
  MMRT_REQUIRE_OPS(Op::kSiluMul);
  const RefCase& c = RefSuite::get().at("silu_mul");
  const Array& x = c.inputs.at("x");
  const int64_t n = x.shape[0], inter = x.shape[1] / 2;
  const DeviceBuf xd(be(), x.f);
  DeviceBuf y(be(), size_t(n * inter));
  silu_mul_fused(be(), xd.get(), y.get(), n, inter);
  const std::vector<float> yh = y.host();
  expect_close(yh.data(), c.out.f.data(), yh.size(), kAtol, kRtol, "silu_mul_fused");
  std::vector<float> gate(size_t(n * inter)), up(size_t(n * inter));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < inter; ++i) {
      gate[size_t(r * inter + i)] = x.f[size_t(r * 2 * inter + i)];
      up[size_t(r * inter + i)] = x.f[size_t(r * 2 * inter + inter + i)];
    }
  DeviceBuf gd(be(), gate);
  const DeviceBuf ud(be(), up);
  DeviceBuf y2(be(), yh.size());
  silu_mul(be(), gd.get(), ud.get(), y2.get(), n, inter);
  const std::vector<float> y2h = y2.host();
  expect_close(y2h.data(), c.out.f.data(), y2h.size(), kAtol, kRtol, "silu_mul");
  silu_mul(be(), gd.get(), ud.get(), gd.get(), n, inter);  // out aliasing gate
  EXPECT_EQ(gd.host(), y2h);
}

TEST_P(OpsDevice, GeluAndQuickGelu) {
  MMRT_REQUIRE_OPS(Op::kGeluErf, Op::kQuickGelu);
  for (const char* name : {"gelu_erf", "quick_gelu"}) {
    const RefCase& c = RefSuite::get().at(name);
    const Array& x = c.inputs.at("x");
    const DeviceBuf xd(be(), x.f);
    DeviceBuf y(be(), x.f.size());
    if (std::string(name) == "gelu_erf")
      gelu_erf(be(), xd.get(), y.get(), int64_t(y.size()));
    else
      quick_gelu(be(), xd.get(), y.get(), int64_t(y.size()));
    // Absolute 1e-6 matters near zero (the negative tails are tiny).
    const std::vector<float> yh = y.host();
    expect_close(yh.data(), c.out.f.data(), yh.size(), 1e-6, kRtol, name);
  }
}

TEST_P(OpsDevice, SoftmaxRows) {
  MMRT_REQUIRE_OPS(Op::kSoftmax);
  const RefCase& c = RefSuite::get().at("softmax");
  const Array& x = c.inputs.at("x");
  const DeviceBuf xd(be(), x.f);
  DeviceBuf y(be(), x.f.size());
  softmax(be(), xd.get(), y.get(), x.shape[0], x.shape[1]);
  const std::vector<float> yh = y.host();
  expect_close(yh.data(), c.out.f.data(), yh.size(), 1e-7, kRtol, "softmax");
}

TEST_P(OpsDevice, ResidualAdd) {
  MMRT_REQUIRE_OPS(Op::kAdd);
  auto a = randn(1037, 7), b = randn(1037, 8);
  DeviceBuf acc(be(), a);
  const DeviceBuf bd(be(), b);
  add(be(), acc.get(), bd.get(), int64_t(a.size()));
  const std::vector<float> got = acc.host();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(got[i], a[i] + b[i]) << i;  // exact in fp32
}

TEST_P(OpsDevice, EmbeddingMatchesTorch) {
  MMRT_REQUIRE_OPS(Op::kEmbedding);
  for (const char* name : {"embedding_f32", "embedding_bf16"}) {
    const RefCase& c = RefSuite::get().at(name);
    const Array& ids = c.inputs.at("ids");
    const Tensor table = be().upload(tensor_of(c.inputs.at("table")));
    DeviceBuf out(be(), size_t(ids.shape[0] * 72));
    embedding(be(), table, ids.i.data(), ids.shape[0], out.get());
    const std::vector<float> got = out.host();
    expect_close(got.data(), c.out.f.data(), got.size(), 0.0, 0.0, name);  // exact copies
  }
}

INSTANTIATE_TEST_SUITE_P(Device, OpsDevice, ::testing::ValuesIn(kDevices), isa_param_name);

TEST(Ops, ArgmaxMatchesTorch) {
  const RefCase& c = RefSuite::get().at("argmax");
  const Array& x = c.inputs.at("x");
  EXPECT_EQ(argmax(x.f.data(), int64_t(x.f.size())), c.out.i.at(0));
  EXPECT_EQ(c.out.i.at(0), 70001);
  std::vector<float> v = {1.0f, 3.0f, 2.0f, std::nanf(""), 3.0f};  // NaN is the maximum
  EXPECT_EQ(argmax(v.data(), 5), 3);
  std::vector<float> w(100, -1.0f);
  w[97] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(argmax(w.data(), 100), 97);
  EXPECT_EQ(argmax(w.data(), 1), 0);
}

TEST(Ops, InvalidArgumentsThrow) {
  Tensor table = Tensor::zeros(DType::kF32, {10, 4});
  std::vector<float> out(8);
  const int32_t bad_hi[] = {1, 10}, bad_lo[] = {-1};
  EXPECT_THROW(embedding(be(), table, bad_hi, 2, out.data()), InvalidArgument);
  EXPECT_THROW(embedding(be(), table, bad_lo, 1, out.data()), InvalidArgument);
  Tensor w = Tensor::zeros(DType::kF32, {5});
  std::vector<float> x(8);
  EXPECT_THROW(rms_norm(be(), x.data(), w, 1e-6f, x.data(), 2, 4), InvalidArgument);  // d mismatch
  Tensor wi = Tensor::zeros(DType::kI32, {4});
  EXPECT_THROW(rms_norm(be(), x.data(), wi, 1e-6f, x.data(), 2, 4), InvalidArgument);
  EXPECT_THROW(argmax(x.data(), 0), InvalidArgument);
  EXPECT_THROW(silu_mul(be(), x.data(), x.data(), x.data(), 1, 4, 2), InvalidArgument);
}

TEST(Ops, LargeInputsUseThreadsAndAgree) {
  // Big enough to be split across threads; must equal the single-thread result exactly.
  const int64_t n = 64, d = 1536;
  auto x = randn(size_t(n * d), 11);
  Tensor w = Tensor::empty(DType::kF32, {d});
  auto wv = randn(size_t(d), 12);
  std::copy(wv.begin(), wv.end(), w.data<float>());
  std::vector<float> y1(x.size()), y4(x.size());
  const kernels::CpuBackend one({.threads = 1}), four({.threads = 4});
  rms_norm(one, x.data(), w, 1e-6f, y1.data(), n, d);
  rms_norm(four, x.data(), w, 1e-6f, y4.data(), n, d);
  EXPECT_EQ(y1, y4);
  gelu_erf(one, x.data(), y1.data(), n * d);
  gelu_erf(four, x.data(), y4.data(), n * d);
  EXPECT_EQ(y1, y4);
}

}  // namespace
