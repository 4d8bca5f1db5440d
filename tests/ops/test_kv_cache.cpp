// Paged KV-cache storage: layout, slot writes, read-back, block copies and argument checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "core/convert.h"
#include "core/error.h"
#include "isa_fixture.h"
#include "kernels/kv_cache.h"
#include "ref_suite.h"

using namespace mmrt;
using namespace mmrt::kernels;
using namespace mmrt::test;

namespace {

KvCacheConfig small(DType dt) {
  return {.n_layers = 3,
          .num_blocks = 5,
          .block_size = 16,
          .n_kv_heads = 2,
          .head_dim = 32,
          .dtype = dt};
}

TEST(KvCache, SizesAndAlignment) {
  KvCache c(be(), small(DType::kBF16));
  EXPECT_EQ(c.bytes(), size_t(3) * 2 * 5 * 16 * 2 * 32 * 2);
  EXPECT_EQ(c.bytes_per_block(), c.bytes() / 5);
  EXPECT_EQ(c.num_slots(), 80);
  for (int l = 0; l < 3; ++l) {
    KvLayerView v = c.layer(l);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.k) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.v) % 64, 0u);
    EXPECT_EQ(v.block_size, 16);
    EXPECT_EQ(v.dtype, DType::kBF16);
  }
}

TEST(KvCache, LayoutIsTransposedKAndRowMajorV) {
  KvCache c(be(), small(DType::kF32));
  const int32_t slot = 3 * 16 + 5;  // block 3, offset 5
  std::vector<float> k(64), v(64);
  std::iota(k.begin(), k.end(), 1.0f);
  std::iota(v.begin(), v.end(), 1000.0f);
  c.write(2, k.data(), v.data(), &slot, 1);
  const float* kb = static_cast<const float*>(c.layer(2).k);
  const float* vb = static_cast<const float*>(c.layer(2).v);
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < 32; ++d) {
      // K: [block, head, d, offset]; V: [block, head, offset, d]
      EXPECT_EQ(kb[((3 * 2 + h) * 32 + d) * 16 + 5], k[size_t(h * 32 + d)]);
      EXPECT_EQ(vb[((3 * 2 + h) * 16 + 5) * 32 + d], v[size_t(h * 32 + d)]);
    }
}

// The round trip and block copies on every backend (isa_fixture.h), rows in its memory.
class KvDevice : public DeviceFixture {
 protected:
  KvDevice() : DeviceFixture({Op::kKvWrite, Op::kKvRead}) {}
};

TEST_P(KvDevice, WriteReadRoundTrip) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    KvCache c(be(), small(dt));
    const std::vector<int32_t> slots = {79, 0, 17, 33, 48, 64, 15};
    const int64_t n = int64_t(slots.size()), row = 64, stride = 100;  // padded input rows
    auto k = randn(size_t(n * stride), 1), v = randn(size_t(n * stride), 2);
    const DeviceBuf kd(be(), k), vd(be(), v);
    c.write(1, kd.get(), vd.get(), slots.data(), n, stride, stride);
    DeviceBuf krd(be(), size_t(n * row)), vrd(be(), size_t(n * row));
    c.read(1, slots.data(), n, krd.get(), vrd.get());
    std::vector<float> kr = krd.host(), vr = vrd.host();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < row; ++j) {
        float ke = k[size_t(i * stride + j)], ve = v[size_t(i * stride + j)];
        if (dt == DType::kBF16) {
          ke = bf16_to_f32_scalar(f32_to_bf16_scalar(ke));
          ve = bf16_to_f32_scalar(f32_to_bf16_scalar(ve));
        }
        ASSERT_EQ(kr[size_t(i * row + j)], ke) << dtype_name(dt) << " token " << i;
        ASSERT_EQ(vr[size_t(i * row + j)], ve) << dtype_name(dt) << " token " << i;
      }
    // Other layers stay zero.
    c.read(0, slots.data(), n, krd.get(), vrd.get());
    for (float x : krd.host()) ASSERT_EQ(x, 0.0f);
  }
}

TEST_P(KvDevice, CopyBlockCopiesEveryLayer) {
  KvCache c(be(), small(DType::kBF16));
  std::vector<int32_t> src(16), dst(16);
  std::iota(src.begin(), src.end(), 2 * 16);
  std::iota(dst.begin(), dst.end(), 4 * 16);
  const DeviceBuf k(be(), randn(16 * 64, 3)), v(be(), randn(16 * 64, 4));
  for (int l = 0; l < 3; ++l) c.write(l, k.get(), v.get(), src.data(), 16);
  c.copy_block(2, 4);
  DeviceBuf ka(be(), 16 * 64), va(be(), 16 * 64), kb(be(), 16 * 64), vb(be(), 16 * 64);
  for (int l = 0; l < 3; ++l) {
    c.read(l, src.data(), 16, ka.get(), va.get());
    c.read(l, dst.data(), 16, kb.get(), vb.get());
    EXPECT_EQ(ka.host(), kb.host());
    EXPECT_EQ(va.host(), vb.host());
  }
}

INSTANTIATE_TEST_SUITE_P(Device, KvDevice, ::testing::ValuesIn(kDevices), isa_param_name);

TEST(KvCache, InvalidArgumentsThrow) {
  auto cfg = small(DType::kF32);
  cfg.block_size = 24;
  EXPECT_THROW(KvCache(be(), cfg), InvalidArgument);
  cfg = small(DType::kF32);
  cfg.head_dim = 40;
  EXPECT_THROW(KvCache(be(), cfg), InvalidArgument);
  cfg = small(DType::kF16);
  EXPECT_THROW(KvCache(be(), cfg), InvalidArgument);
  KvCache c(be(), small(DType::kF32));
  std::vector<float> k(64);
  const int32_t bad = 80, neg = -1;
  EXPECT_THROW(c.write(0, k.data(), k.data(), &bad, 1), InvalidArgument);
  EXPECT_THROW(c.write(0, k.data(), k.data(), &neg, 1), InvalidArgument);
  const int32_t ok = 1;
  EXPECT_THROW(c.write(3, k.data(), k.data(), &ok, 1), InvalidArgument);
  EXPECT_THROW(c.write(0, k.data(), k.data(), &ok, 1, 32), InvalidArgument);  // stride < row
  EXPECT_THROW(c.copy_block(0, 5), InvalidArgument);
}

}  // namespace
