// Resize checked byte for byte against PIL 9.4's Image.resize (bicubic and bilinear, up and down,
// odd sizes, 1-pixel-wide and very wide images) for every kernel variant this CPU runs, with and
// without a thread pool; the coefficient vectors against the values in the preprocessing spec.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "media/resize.h"
#include "media/resize_impl.h"
#include "media_test_util.h"

using namespace mmrt;
using namespace mmrt::media;
using namespace media_test;

namespace {

// Every variant this CPU runs, as a cap for MediaContext::isa.
std::vector<Isa> variants() {
  std::vector<Isa> v{Isa::kPortable};
  if (isa_supported(Isa::kAvx2)) v.push_back(Isa::kAvx2);
  if (isa_supported(Isa::kAvx512)) v.push_back(Isa::kAvx512);
  return v;
}

}  // namespace

TEST(MediaResize, CoefficientsMatchSpecVectors) {
  // Spec §6 (confirmed there against PIL 9.4): bicubic 1000 -> 224, output 0.
  detail::AxisPlan p = detail::plan_axis(1000, 224, ResizeFilter::kBicubic);
  EXPECT_EQ(p.first[0], 0);
  EXPECT_EQ(p.count[0], 11);
  EXPECT_NEAR(p.k[0] / double(1 << 22), 0.172819, 1e-6);
  EXPECT_NEAR(p.k[1] / double(1 << 22), 0.228246, 1e-6);
  EXPECT_NEAR(p.k[2] / double(1 << 22), 0.240868, 1e-6);
  int64_t sum = 0;
  for (int j = 0; j < p.count[0]; ++j) sum += p.k[j];
  EXPECT_EQ(sum, 4194303);
  // 100 -> 300 (upscaling: no antialias), outputs 0 and 150.
  detail::AxisPlan u = detail::plan_axis(100, 300, ResizeFilter::kBicubic);
  EXPECT_EQ(u.first[0], 0);
  EXPECT_EQ(u.count[0], 2);
  EXPECT_NEAR(u.k[0] / double(1 << 22), 1.105263, 1e-6);
  EXPECT_NEAR(u.k[1] / double(1 << 22), -0.105263, 1e-6);
  EXPECT_EQ(u.first[150], 48);
  const int32_t* k150 = &u.k[150 * u.ksize];
  EXPECT_NEAR(k150[0] / double(1 << 22), -0.037037, 1e-6);
  EXPECT_NEAR(k150[1] / double(1 << 22), 0.333333, 1e-6);
  EXPECT_NEAR(k150[2] / double(1 << 22), 0.777778, 1e-6);
  EXPECT_NEAR(k150[3] / double(1 << 22), -0.074074, 1e-6);
}

TEST(MediaResize, IdenticalToPilForEveryKernelVariant) {
  MEDIA_REF_OR_FAIL(ref);
  int n = 0;
  for (const Isa cap : variants()) {
    const std::string isa = resize_isa(cap);
    const MediaContext ctx{.isa = cap};
    for (const auto& c : ref.manifest["resize"]) {
      Image src = image_from_npy(read_npy((ref.dir / c["src"].get<std::string>()).string()));
      const int w = c["w"], h = c["h"];
      const std::string filt = c["filter"];
      SCOPED_TRACE(isa + ": " + std::to_string(src.width()) + "x" + std::to_string(src.height()) +
                   " -> " + std::to_string(w) + "x" + std::to_string(h) + " " + filt);
      Tensor want = read_npy((ref.dir / c["expect"].get<std::string>()).string());
      ResizeFilter f = filt == "bicubic" ? ResizeFilter::kBicubic : ResizeFilter::kBilinear;
      EXPECT_TRUE(same_pixels(resize(src, w, h, f, ctx), want));
      ++n;
    }
  }
  EXPECT_GE(n, 30);
  // The names say which kernels ran: each cap picks its own.
  EXPECT_STREQ(resize_isa(Isa::kPortable), "scalar");
  if (isa_supported(Isa::kAvx2)) {
    EXPECT_STREQ(resize_isa(Isa::kAvx2), "avx2");
  }
}

TEST(MediaResize, ThreadPoolGivesTheSameBytes) {
  MEDIA_REF_OR_FAIL(ref);
  ThreadPool pool(4);
  const MediaContext ctx{.pool = &pool, .buffers = BufferCache::create(size_t{64} << 20)};
  for (const auto& c : ref.manifest["resize"]) {
    Image src = image_from_npy(read_npy((ref.dir / c["src"].get<std::string>()).string()));
    Tensor want = read_npy((ref.dir / c["expect"].get<std::string>()).string());
    ResizeFilter f = c["filter"] == "bicubic" ? ResizeFilter::kBicubic : ResizeFilter::kBilinear;
    EXPECT_TRUE(same_pixels(resize(src, c["w"], c["h"], f, ctx), want));
  }
}

// The streaming resizer (rows pushed one by one, as decoders do) equals the whole-image one.
TEST(MediaResize, StreamingEqualsWholeImage) {
  MEDIA_REF_OR_FAIL(ref);
  for (const auto& c : ref.manifest["resize"]) {
    Image src = image_from_npy(read_npy((ref.dir / c["src"].get<std::string>()).string()));
    Tensor want = read_npy((ref.dir / c["expect"].get<std::string>()).string());
    ResizeFilter f = c["filter"] == "bicubic" ? ResizeFilter::kBicubic : ResizeFilter::kBilinear;
    detail::StreamingResizer s(src.width(), src.height(), c["w"], c["h"], f, MediaContext{});
    for (int y = 0; y < src.height(); ++y) {
      std::memcpy(s.row_buffer(y), src.row(y), src.stride());
      s.push_row(y);
    }
    EXPECT_TRUE(same_pixels(s.finish(), want));
  }
}

TEST(MediaResize, RejectsBadSizes) {
  Image src(4, 4);
  EXPECT_THROW(resize(src, 0, 4, ResizeFilter::kBicubic), InvalidArgument);
  EXPECT_THROW(resize(src, 4, -1, ResizeFilter::kBilinear), InvalidArgument);
  EXPECT_THROW(resize(Image(), 4, 4, ResizeFilter::kBilinear), InvalidArgument);
}
