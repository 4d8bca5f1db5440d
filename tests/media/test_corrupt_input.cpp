// Bad input must leave the process healthy: seeded random corruptions (byte flips, runs of
// garbage, truncations) of every kind of test file either decode or throw an mmrt::Error; never a
// crash, an abort or (under ASan) a memory error.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/error.h"
#include "media/image.h"
#include "media/pipeline.h"
#include "media_test_util.h"

using namespace mmrt;
using namespace mmrt::media;
using namespace media_test;

TEST(MediaCorruptInput, MutatedFilesDecodeOrThrowCleanly) {
  MEDIA_REF_OR_FAIL(ref);
  std::mt19937 rng(20240531);
  int decoded = 0, refused = 0;
  for (const char* name :
       {"chelsea_q50_420.jpg", "coffee_q90_progressive.jpg", "chelsea_cmyk.jpg", "camera_gray.jpg",
        "chelsea_p.png", "pal2bit.png", "rgba16.png", "adam7_gray2.png", "chelsea_lossy.webp",
        "chelsea_lossless_alpha.webp"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> good = read_bytes(ref.dir / "img" / name);
    for (int trial = 0; trial < 24; ++trial) {
      std::vector<uint8_t> b = good;
      switch (trial % 3) {
        case 0:  // a few flipped bytes anywhere, headers included
          for (int k = 0; k < 1 + trial % 5; ++k) b[rng() % b.size()] ^= 1 + rng() % 255;
          break;
        case 1: {  // a run of garbage
          size_t at = rng() % b.size(), n = std::min<size_t>(b.size() - at, 1 + rng() % 64);
          for (size_t i = 0; i < n; ++i) b[at + i] = static_cast<uint8_t>(rng());
          break;
        }
        default:  // truncated at a random point
          b.resize(1 + rng() % (b.size() - 1));
      }
      const PreprocessMode mode = trial % 2 ? PreprocessMode::kFast : PreprocessMode::kReference;
      try {
        Image im = decode_image(b, {.max_pixels = 4'000'000});
        // The streaming decode + resize pipeline preprocessing uses, to a third of the size.
        const DecodedResized q =
            decode_resized(b,
                           [](int w, int h) {
                             return Size2{std::max(1, w / 3), std::max(1, h / 3)};
                           },
                           ResizeFilter::kBicubic, {.max_pixels = 4'000'000, .mode = mode}, {});
        EXPECT_GT(im.width(), 0);
        EXPECT_EQ(q.image.width(), std::max(1, q.source.width / 3));
        ++decoded;
      } catch (const Error& e) {
        EXPECT_NE(e.code(), ErrorCode::kInternal) << e.what();
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(decoded, 0);
  // Still healthy afterwards.
  EXPECT_EQ(decode_image(read_bytes(ref.dir / "img" / "chelsea_q75_422.jpg")).width(), 451);
}
