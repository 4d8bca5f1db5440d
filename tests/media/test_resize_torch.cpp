// resize_like_torchvision without a reference process: sizes, copies, 1x1, errors, the weights
// against values read back from torch 1.13 (an impulse through interpolate() returns each weight
// exactly), the tap rule, the thread pool and every kernel variant against the portable one, bit
// for bit. The comparison with torchvision itself is test_resize_torch_ref.cpp.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/isa.h"
#include "core/thread_pool.h"
#include "media/resize_torch.h"
#include "media/resize_torch_impl.h"

using namespace mmrt;
using namespace mmrt::media;

namespace {

std::vector<Isa> variants() {
  std::vector<Isa> v{Isa::kPortable};
  if (isa_supported(Isa::kAvx2)) v.push_back(Isa::kAvx2);
  if (isa_supported(Isa::kAvx512)) v.push_back(Isa::kAvx512);
  return v;
}

Image random_image(int w, int h, uint32_t seed) {
  Image im(w, h);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < im.size_bytes(); ++i) im.data()[i] = static_cast<uint8_t>(rng() >> 24);
  return im;
}

bool same(const Image& a, const Image& b) {
  return a.width() == b.width() && a.height() == b.height() &&
         std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// The plan's weights of output i as a dense vector over the input.
std::vector<float> dense(const detail::TorchAxis& a, int i) {
  std::vector<float> v(a.in_size, 0.0f);
  for (int j = 0; j < a.count[i]; ++j) v[a.first[i] + j] = a.w[static_cast<size_t>(i) * a.taps + j];
  return v;
}

void expect_weights(int in, int out, int i, int first, const std::vector<float>& want) {
  SCOPED_TRACE(std::to_string(in) + " -> " + std::to_string(out) + ", output " + std::to_string(i));
  const std::vector<float> got = dense(detail::plan_torch_axis(in, out), i);
  for (int x = 0; x < in; ++x) {
    const float w = x >= first && x < first + static_cast<int>(want.size()) ? want[x - first] : 0;
    EXPECT_EQ(got[x], w) << "input " << x;  // bit for bit
  }
}

}  // namespace

TEST(MediaResizeTorch, WeightsAreTorchsBitForBit) {
  // Read back from torch 1.13's AVX2 build: interpolate(eye(n)[None, None], size=[n, m],
  // mode="bicubic", antialias=True)[0, 0][:, i].
  expect_weights(
      1000, 224, 0, 0,
      {0.172818497f, 0.228246197f, 0.240868241f, 0.202331096f, 0.133997738f, 0.060446389f,
       0.00625524111f, -0.014703922f, -0.0174344014f, -0.0105579328f, -0.00226720376f});
  expect_weights(100, 300, 150, 48, {-0.0370367765f, 0.333331615f, 0.777779162f, -0.0740740299f});
  expect_weights(
      1920, 644, 321, 953,
      {-0.0116668362f, -0.0248237159f, -0.00154078274f, 0.108558349f, 0.258834839f, 0.335404873f,
       0.261278838f, 0.111332744f, -0.000523003226f, -0.0248408355f, -0.0120143788f});
  expect_weights(640, 644, 5, 3, {-0.000563618378f, 0.0193550102f, 0.997142375f, -0.0159337297f});
}

TEST(MediaResizeTorch, TapsAreFusedFromTheLastPartialGroupOfFour) {
  // torch's vectorised loop: taps 1.. in groups of 4 (product, then sum), the rest fused.
  const int want[] = {1, 1, 1, 1, 5, 5, 5, 5, 9, 9, 9, 9, 13};
  for (int n = 1; n <= 13; ++n) EXPECT_EQ(detail::torch_fused_from(n), want[n - 1]) << n;
  const detail::TorchAxis a = detail::plan_torch_axis(1920, 644);
  EXPECT_EQ(a.taps, 2 * 6 + 1);
  for (int i = 0; i < a.out_size; ++i) {
    EXPECT_GE(a.first[i], 0);
    EXPECT_LE(a.first[i] + a.count[i], 1920);
    EXPECT_EQ(a.fused[i], detail::torch_fused_from(a.count[i]));
  }
}

TEST(MediaResizeTorch, SizesCopiesAndOnePixel) {
  const Image src = random_image(37, 23, 1);
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{
           {1, 1}, {5, 7}, {37, 11}, {12, 23}, {80, 45}, {3, 200}, {644, 364}}) {
    const Image out = resize_like_torchvision(src, w, h);
    EXPECT_EQ(out.width(), w);
    EXPECT_EQ(out.height(), h);
  }
  EXPECT_TRUE(same(resize_like_torchvision(src, 37, 23), src));  // same size: a copy
  // A 1x1 source stays one colour at any size (the weights of each output sum to ~1).
  Image dot(1, 1);
  dot.data()[0] = 7, dot.data()[1] = 128, dot.data()[2] = 255;
  const Image big = resize_like_torchvision(dot, 9, 4);
  for (int i = 0; i < 9 * 4; ++i) {
    EXPECT_EQ(big.data()[3 * i], 7);
    EXPECT_EQ(big.data()[3 * i + 1], 128);
    EXPECT_EQ(big.data()[3 * i + 2], 255);
  }
}

TEST(MediaResizeTorch, FlatImagesStayFlat) {
  for (const int v : {0, 1, 127, 254, 255}) {
    Image flat(61, 29);
    std::memset(flat.data(), v, flat.size_bytes());
    for (const Isa isa : variants())
      for (const auto& [w, h] : std::vector<std::pair<int, int>>{{20, 9}, {61, 40}, {200, 3}}) {
        const Image out = resize_like_torchvision(flat, w, h, MediaContext{.isa = isa});
        for (size_t i = 0; i < out.size_bytes(); ++i) ASSERT_EQ(out.data()[i], v) << i;
      }
  }
}

TEST(MediaResizeTorch, RejectsBadSizes) {
  const Image src(4, 4);
  EXPECT_THROW(resize_like_torchvision(src, 0, 4), InvalidArgument);
  EXPECT_THROW(resize_like_torchvision(src, 4, -1), InvalidArgument);
  EXPECT_THROW(resize_like_torchvision(Image(), 4, 4), InvalidArgument);
  EXPECT_THROW(detail::plan_torch_axis(0, 3), InvalidArgument);
}

TEST(MediaResizeTorch, EveryVariantEqualsPortableBitForBit) {
  const std::vector<std::array<int, 4>> cases = {
      {320, 240, 336, 252}, {640, 360, 644, 364}, {333, 217, 97, 61}, {97, 61, 333, 217},
      {1, 1, 5, 7},         {7, 5, 1, 1},         {1, 97, 3, 20},     {600, 10, 37, 3},
      {13, 300, 56, 28},    {64, 64, 65, 63},     {40, 33, 40, 17},   {40, 33, 19, 33},
      {17, 31, 16, 33},     {1000, 4, 3, 4}};
  int checked = 0;
  for (const auto& [sw, sh, w, h] : cases) {
    const Image src = random_image(sw, sh, static_cast<uint32_t>(sw * 7919 + sh));
    const Image want = resize_like_torchvision(src, w, h, MediaContext{.isa = Isa::kPortable});
    for (const Isa isa : variants()) {
      SCOPED_TRACE(std::string(detail::torch_resize_kernels(isa).name) + ": " + std::to_string(sw) +
                   "x" + std::to_string(sh) + " -> " + std::to_string(w) + "x" + std::to_string(h));
      EXPECT_TRUE(same(resize_like_torchvision(src, w, h, MediaContext{.isa = isa}), want));
      ++checked;
    }
  }
  EXPECT_GE(checked, static_cast<int>(cases.size()));
  EXPECT_STREQ(detail::torch_resize_kernels(Isa::kPortable).name, "scalar");
  if (isa_supported(Isa::kAvx2)) {
    EXPECT_STREQ(detail::torch_resize_kernels(Isa::kAvx2).name, "avx2");
  }
  if (isa_supported(Isa::kAvx512)) {
    EXPECT_STREQ(detail::torch_resize_kernels(Isa::kAvx512).name, "avx512");
  }
}

TEST(MediaResizeTorch, ThreadPoolEqualsSerialBitForBit) {
  ThreadPool pool(4);
  const Image src = random_image(1920, 1080, 42);
  for (const Isa isa : variants())
    for (const auto& [w, h] :
         std::vector<std::pair<int, int>>{{644, 364}, {1288, 728}, {1920, 364}, {644, 1080}}) {
      SCOPED_TRACE(std::string(detail::torch_resize_kernels(isa).name) + " -> " +
                   std::to_string(w) + "x" + std::to_string(h));
      const Image serial = resize_like_torchvision(src, w, h, MediaContext{.isa = isa});
      const Image pooled = resize_like_torchvision(
          src, w, h,
          MediaContext{
              .pool = &pool, .isa = isa, .buffers = BufferCache::create(size_t{64} << 20)});
      EXPECT_TRUE(same(serial, pooled));
    }
}
