// The device seam: device names, the registry's errors, counted copies, tensors that know their
// device, the missing-op errors (a backend without kernels), and the layout ops against direct
// loops on every backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "../common/no_kernels_backend.h"
#include "core/convert.h"
#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "isa_fixture.h"
#include "kernels/kv_cache.h"
#include "kernels/layout.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "kernels/registry.h"
#include "ref_suite.h"

using namespace mmrt;
using namespace mmrt::kernels;
using namespace mmrt::test;

namespace {

// The device seam's fake: host memory, no kernels, "cuda:7".
class NoKernels : public test::NoKernelsBackend {
 public:
  NoKernels() : NoKernelsBackend(7) {}
};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Device, ParsesAndNames) {
  EXPECT_EQ(parse_device("cpu"), Device{});
  EXPECT_EQ(parse_device("cuda"), (Device{.kind = DeviceKind::kCuda, .index = 0}));
  EXPECT_EQ(parse_device("cuda:3"), (Device{.kind = DeviceKind::kCuda, .index = 3}));
  EXPECT_EQ(device_str(parse_device("cuda:12")), "cuda:12");
  EXPECT_EQ(device_str(Device{}), "cpu");
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:1x", "cpu:0", "CUDA", "cuda:99999"})
    EXPECT_THROW(parse_device(bad), InvalidArgument) << bad;
}

TEST(Registry, CpuFirstAndAbsentDevicesAreClearErrors) {
  ASSERT_FALSE(backend_entries().empty());
  EXPECT_EQ(backend_entries()[0].kind, DeviceKind::kCpu);
  const auto cpu = create_backend(Device{}, {.threads = 1});
  EXPECT_TRUE(cpu->device().is_host());
  EXPECT_NE(describe_backends().find("cpu"), std::string::npos);
  // A device index no machine has: refused, naming what the build has and sees.
  const Device absent{.kind = DeviceKind::kCuda, .index = 1000};
  const std::string m = message_of([&] { create_backend(absent); });
  EXPECT_NE(m.find("cuda:1000"), std::string::npos) << m;
  EXPECT_NE(m.find("backends in this build: cpu"), std::string::npos) << m;
  EXPECT_THROW(create_backend(absent), FailedPrecondition);
}

TEST(Backend, CopiesAreCountedAndUploadOfHostMemoryIsFreeOnTheCpu) {
  const CpuBackend b({.threads = 1});
  Tensor host = Tensor::empty(DType::kF32, {4, 8});
  std::iota(host.data<float>(), host.data<float>() + 32, 0.0f);
  const Tensor same = b.upload(host);  // host memory is the CPU's: no copy
  EXPECT_EQ(same.raw(), host.raw());
  EXPECT_EQ(b.transfers().to_device, 0u);
  Tensor dev = b.empty(DType::kF32, {4, 8});
  b.copy_to_device(dev.raw(), host.raw(), host.nbytes());
  std::vector<float> back(32);
  b.copy_to_host(back.data(), dev.raw(), dev.nbytes());
  b.copy_on_device(dev.raw(), dev.raw(), 0);  // empty copies are not counted
  const TransferStats t = b.transfers();
  EXPECT_EQ(t.to_device, 1u);
  EXPECT_EQ(t.to_device_bytes, 128u);
  EXPECT_EQ(t.to_host, 1u);
  EXPECT_EQ(t.to_host_bytes, 128u);
  EXPECT_EQ(t.on_device, 0u);
  EXPECT_EQ(back[31], 31.0f);
}

TEST(Backend, KvBlockCopiesAreDeviceCopies) {
  const CpuBackend b({.threads = 1});
  KvCache c(b, {.n_layers = 2,
                .num_blocks = 3,
                .block_size = 16,
                .n_kv_heads = 1,
                .head_dim = 16,
                .dtype = DType::kF32});
  c.copy_block(0, 2);
  EXPECT_EQ(b.transfers().on_device, 4u);  // K and V of both layers
  EXPECT_EQ(b.transfers().on_device_bytes, c.bytes_per_block());
}

// An op that has a kernel still refuses a tensor or weights of another device (a checkpoint
// tensor on the host handed to a GPU's op would be read there as a device address): the
// dispatcher says which device each is on, before any kernel runs.
TEST(Backend, OpsRefuseMemoryOfAnotherDevice) {
  const CpuBackend cpu({.threads = 1});
  const Device gpu{.kind = DeviceKind::kCuda, .index = 7};
  std::vector<float> x(8), wv(4, 1.0f);
  const Tensor w = Tensor::on_device(wv.data(), DType::kF32, {4}, nullptr, gpu);
  const std::string m = message_of([&] { rms_norm(cpu, x.data(), w, 1e-6f, x.data(), 2, 4); });
  EXPECT_NE(m.find("rms_norm: weight is memory of cuda:7"), std::string::npos) << m;
  EXPECT_THROW(layer_norm(cpu, x.data(), w, w, 1e-6f, x.data(), 2, 4), InvalidArgument);
  const int32_t id = 0;
  EXPECT_THROW(embedding(cpu, w.reshape({1, 4}), &id, 1, x.data()), InvalidArgument);
  rms_norm(cpu, x.data(), Tensor::zeros(DType::kF32, {4}), 1e-6f, x.data(), 2, 4);  // host: fine
  PackedLinear::Parts p;
  p.in = 4;
  p.out = 2;
  p.w = wv.data();
  p.device = gpu;
  const PackedLinear on_gpu(std::move(p));
  const std::string l = message_of([&] { linear(cpu, x.data(), 1, on_gpu, x.data() + 4); });
  EXPECT_NE(l.find("packed for cuda:7"), std::string::npos) << l;
}

TEST(Tensor, KnowsItsDeviceAndRefusesHostCopiesOfDeviceMemory) {
  const NoKernels nk;
  Tensor t = nk.empty(DType::kF32, {2, 3});
  EXPECT_EQ(t.device(), nk.device());
  EXPECT_FALSE(t.on_host());
  EXPECT_EQ(t.reshape({3, 2}).device(), nk.device());
  EXPECT_EQ(t.slice(1, 0, 2).device(), nk.device());
  EXPECT_EQ(t.select(1).device(), nk.device());
  EXPECT_THROW(t.clone(), FailedPrecondition);
  EXPECT_THROW(t.to(DType::kBF16), FailedPrecondition);
  EXPECT_THROW(t.slice(1, 0, 2).contiguous(), FailedPrecondition);
  EXPECT_NO_THROW(t.contiguous());  // already contiguous: no copy
  const Tensor h = nk.to_host(t);
  EXPECT_TRUE(h.on_host());
  EXPECT_EQ(nk.transfers().to_host, 1u);
  // Another backend's device memory is not this one's to copy.
  const CpuBackend cpu({.threads = 1});
  EXPECT_THROW(cpu.to_host(t), FailedPrecondition);
  EXPECT_THROW(cpu.upload(t), FailedPrecondition);
}

TEST(Backend, AnOpTheDeviceLacksIsAnErrorNamingOpAndDevice) {
  const NoKernels nk;
  std::vector<float> x(8);
  const Tensor w = Tensor::zeros(DType::kF32, {4});
  const std::string m = message_of([&] { rms_norm(nk, x.data(), w, 1e-6f, x.data(), 2, 4); });
  EXPECT_NE(m.find("rms_norm"), std::string::npos) << m;
  EXPECT_NE(m.find("cuda:7"), std::string::npos) << m;
  EXPECT_THROW(add(nk, x.data(), x.data(), 8), Unimplemented);
  EXPECT_THROW(copy2d(nk, x.data(), 4, x.data() + 4, 4, 1, 4), Unimplemented);
  EXPECT_THROW(KvCache(nk, {.n_layers = 1,
                            .num_blocks = 1,
                            .block_size = 16,
                            .n_kv_heads = 1,
                            .head_dim = 16,
                            .dtype = DType::kF32})
                   .write(0, x.data(), x.data(), std::vector<int32_t>{0}.data(), 1),
               Unimplemented);
  EXPECT_FALSE(nk.has(Op::kLinear));
  EXPECT_EQ(nk.missing(std::vector<Op>{Op::kAdd, Op::kLinear}).size(), 2u);
  const std::string r = message_of([&] { nk.require({Op::kAdd, Op::kLinear}, "a test model"); });
  EXPECT_NE(r.find("a test model cannot run on cuda:7"), std::string::npos) << r;
  EXPECT_NE(r.find("add, linear"), std::string::npos) << r;
  EXPECT_THROW(nk.require({Op::kAdd}, "x"), Unimplemented);
  // The CPU runs every op.
  std::vector<Op> all;
  for (int i = 0; i < int(Op::kCount); ++i) all.push_back(Op(i));
  EXPECT_TRUE(be().missing(all).empty());
  for (Op op : all) EXPECT_STRNE(op_name(op), "?");
}

// ---- layout ops against direct loops, on every backend ----

class LayoutDevice : public DeviceFixture {};

TEST_P(LayoutDevice, Copy2dMovesTheRowsAsked) {
  MMRT_REQUIRE_OPS(Op::kCopy2d);
  const std::vector<float> src = randn(7 * 19, 31);
  const DeviceBuf s(be(), src);
  DeviceBuf d(be(), 7 * 12);
  copy2d(be(), d.get() + 1, 12, s.get() + 2, 19, 7, 9);  // 9 of 19 columns into 12-wide rows
  const std::vector<float> got = d.host();
  for (int r = 0; r < 7; ++r)
    for (int c = 0; c < 12; ++c) {
      const float v = got[size_t(r * 12 + c)];
      if (c >= 1 && c < 10)
        ASSERT_EQ(v, src[size_t(r * 19 + c - 1 + 2)]) << r << "," << c;
      else
        ASSERT_TRUE(std::isnan(v)) << "wrote outside the rows at " << r << "," << c;
    }
  EXPECT_THROW(copy2d(be(), d.get(), 3, s.get(), 19, 1, 4), InvalidArgument);  // stride < cols
}

TEST_P(LayoutDevice, Im2col1dMatchesTheConvolutionWindows) {
  MMRT_REQUIRE_OPS(Op::kIm2col1d);
  for (const bool channel_major : {true, false}) {
    const int64_t C = 5, T = 23, K = 3;
    for (const int64_t stride : {1, 2}) {
      const int64_t pad = 1, t_out = (T + 2 * pad - K) / stride + 1;
      const std::vector<float> x = randn(size_t(C * T), 32 + uint32_t(stride));
      const Im2col1d sh{.channels = C,
                        .t_in = T,
                        .c_stride = channel_major ? T : 1,
                        .t_stride = channel_major ? 1 : C,
                        .k = K,
                        .stride = stride,
                        .pad = pad,
                        .t_out = t_out};
      const DeviceBuf xd(be(), x);
      DeviceBuf cols(be(), size_t(t_out * C * K));
      im2col_1d(be(), xd.get(), sh, cols.get());
      const std::vector<float> got = cols.host();
      for (int64_t t = 0; t < t_out; ++t)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t j = 0; j < K; ++j) {
            const int64_t s = t * stride + j - pad;
            const float want =
                s < 0 || s >= T ? 0.0f : x[size_t(channel_major ? c * T + s : s * C + c)];
            ASSERT_EQ(got[size_t(t * C * K + c * K + j)], want) << t << "," << c << "," << j;
          }
    }
  }
}

TEST_P(LayoutDevice, Patchify2dMatchesAStridedConvolutionsInputs) {
  MMRT_REQUIRE_OPS(Op::kPatchify2d);
  const int64_t n = 2, C = 3, S = 12, P = 4, side = S / P;
  const std::vector<float> img = randn(size_t(n * C * S * S), 33);
  const DeviceBuf im(be(), img);
  DeviceBuf rows(be(), size_t(n * side * side * C * P * P));
  patchify_2d(be(), im.get(), n, C, S, P, rows.get());
  const std::vector<float> got = rows.host();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t py = 0; py < side; ++py)
      for (int64_t px = 0; px < side; ++px)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t y = 0; y < P; ++y)
            for (int64_t x = 0; x < P; ++x) {
              const size_t row = size_t((i * side + py) * side + px);
              ASSERT_EQ(got[row * size_t(C * P * P) + size_t((c * P + y) * P + x)],
                        img[size_t(((i * C + c) * S + py * P + y) * S + px * P + x)]);
            }
  EXPECT_THROW(patchify_2d(be(), im.get(), n, C, 13, P, rows.get()), InvalidArgument);
}

TEST_P(LayoutDevice, F16StorageMatchesTheScalarConversion) {
  MMRT_REQUIRE_OPS(Op::kToF16, Op::kFromF16);
  // Normal values, ties, subnormals, overflow to infinity, zeros and a NaN, over 2 blocks of work.
  std::vector<float> x = randn(70001, 34);
  const float specials[] = {0.0f,    -0.0f,   1.0f + 1.0f / 2048, 65504.0f, 65520.0f,     -1e6f,
                            6.0e-8f, 3.0e-5f, -2.0e-7f,           1e-10f,   std::nanf("")};
  std::copy(std::begin(specials), std::end(specials), x.begin());
  for (size_t i = 100; i < 200; ++i) x[i] *= 1e-5f;  // subnormal f16 range
  const size_t n = x.size();
  const DeviceBuf xd(be(), x);
  DeviceBuf half(be(), (n + 1) / 2), back(be(), n);
  auto* h = reinterpret_cast<uint16_t*>(half.get());
  to_f16(be(), xd.get(), h, int64_t(n));
  from_f16(be(), h, back.get(), int64_t(n));
  const std::vector<float> hv = half.host(), got = back.host();
  std::vector<uint16_t> bits(n);
  std::memcpy(bits.data(), hv.data(), n * sizeof(uint16_t));
  for (size_t i = 0; i < n; ++i) {
    const uint16_t want = f32_to_f16_scalar(x[i]);
    if (std::isnan(x[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << i;
      continue;
    }
    ASSERT_EQ(bits[i], want) << i << ": " << x[i];
    ASSERT_EQ(got[i], f16_to_f32_scalar(want)) << i;
  }
  EXPECT_THROW(to_f16(be(), xd.get(), h, -1), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Device, LayoutDevice, ::testing::ValuesIn(kDevices), isa_param_name);

}  // namespace
