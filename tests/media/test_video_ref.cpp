// Video decoding against PyAV 10 and torchvision 0.14 (tests/reference/video_ref.py, run once per
// process under Debian's Python): clips in every container and codec the decoder accepts (H.264
// with B-frames and 12-frame GOPs, full range, BT.709-tagged, 4:4:4, 10-bit; HEVC; VP9 at an odd
// size; VP8; AV1 (4:2:0 and RGB) through libdav1d; MPEG-4 and MJPEG in AVI; 1x1). Stated
// tolerances:
//   frames: bit-identical to PyAV's frame.to_ndarray(format="rgb24") for the same indices, every
//           clip (the same libswscale calls: SWS_BILINEAR, swscale's default colour details,
//           the destination laid out as av_image_alloc(align 16) lays it out), with seeking
//   frame count and rate: equal to len(list(container.decode(video=0))) and
//           float(stream.average_rate), and to torchvision's read_video / read_video_timestamps
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "io/npy.h"
#include "media/video.h"
#include "media_test_util.h"

namespace {

namespace fs = std::filesystem;
using mmrt::Tensor;
using namespace mmrt::media;

using Ref = media_test::RefRun;

const Ref& ref() {
  static const Ref r("video_ref.py", "video_ref");
  return r;
}

#define REF_OR_FAIL(var)  \
  const Ref& var = ref(); \
  ASSERT_TRUE(var.error.empty()) << var.error

const auto& bytes_of = media_test::read_bytes;

// Frame j of a uint8 [n, H, W, 3] array against an Image: the mismatch count and the first.
::testing::AssertionResult same_frame(const Image& got, const Tensor& want, int64_t j) {
  if (want.rank() != 4 || got.height() != want.dim(1) || got.width() != want.dim(2))
    return ::testing::AssertionFailure()
           << "size " << got.width() << "x" << got.height() << " vs expected " << want.describe();
  const uint8_t* w = want.data<uint8_t>() + static_cast<size_t>(j) * got.size_bytes();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size_bytes(); ++i)
    if (got.data()[i] != w[i] && bad++ == 0) first = i;
  if (bad == 0) return ::testing::AssertionSuccess();
  const size_t px = first / 3;
  return ::testing::AssertionFailure()
         << bad << " of " << got.size_bytes() << " bytes differ; first at (x=" << px % got.width()
         << ", y=" << px / got.width() << ", c=" << first % 3 << "): got " << int(got.data()[first])
         << ", expected " << int(w[first]);
}

}  // namespace

TEST(VideoRef, CountRateAndSizeMatchPyAVAndTorchvision) {
  REF_OR_FAIL(r);
  ASSERT_GE(r.manifest["clips"].size(), 13u);
  for (const auto& c : r.manifest["clips"]) {
    const std::string name = c["name"];
    const std::vector<uint8_t> data = bytes_of(r.dir / c["file"].get<std::string>());
    const VideoInfo info = probe_video(data);
    EXPECT_EQ(info.container, c["container"].get<std::string>()) << name;
    EXPECT_EQ(info.codec, c["codec"].get<std::string>()) << name;
    EXPECT_EQ(info.width, c["width"].get<int>()) << name;
    EXPECT_EQ(info.height, c["height"].get<int>()) << name;
    EXPECT_EQ(info.fps, c["fps"].get<double>()) << name;  // the same rational, as a double
    EXPECT_EQ(info.frames, c["frames"].get<int64_t>()) << name;
    if (c.contains("torchvision")) {
      const auto& tv = c["torchvision"];
      EXPECT_EQ(info.frames, tv["frames"].get<int64_t>()) << name << " (torchvision read_video)";
      EXPECT_EQ(info.frames, tv["timestamps"].get<int64_t>()) << name;
      EXPECT_EQ(info.fps, tv["fps"].get<double>()) << name;
      EXPECT_EQ(info.fps, tv["info_fps"].get<double>()) << name;
      EXPECT_TRUE(tv["same_as_pyav"].get<bool>()) << name << ": torchvision's frames are PyAV's";
    }
  }
}

TEST(VideoRef, FramesAreBitIdenticalToPyAVRgb24) {
  REF_OR_FAIL(r);
  int seeks = 0;
  for (const auto& c : r.manifest["clips"]) {
    const std::string name = c["name"];
    const std::vector<uint8_t> data = bytes_of(r.dir / c["file"].get<std::string>());
    const std::vector<int64_t> idx = c["indices"].get<std::vector<int64_t>>();
    const Tensor want = mmrt::io::read_npy((r.dir / c["expect"].get<std::string>()).string());
    ASSERT_EQ(want.dtype(), mmrt::DType::kU8);
    ASSERT_EQ(want.dim(0), static_cast<int64_t>(idx.size())) << name;
    const VideoFrames v = decode_video_frames(data, idx);
    ASSERT_EQ(v.frames.size(), idx.size()) << name;
    for (size_t j = 0; j < idx.size(); ++j)
      EXPECT_TRUE(same_frame(v.frames[j], want, static_cast<int64_t>(j)))
          << name << " frame " << idx[j];
    // Each frame alone (a seek straight to its key frame, or none) gives the same pixels.
    for (size_t j = 0; j < idx.size(); ++j) {
      const int64_t one[] = {idx[j]};
      const VideoFrames s = decode_video_frames(data, one);
      EXPECT_TRUE(same_frame(s.frames[0], want, static_cast<int64_t>(j)))
          << name << " frame " << idx[j] << " alone";
      seeks += s.seeks;
    }
    std::printf(
        "[ video ] %-18s %-5s %4dx%-4d %5.2f fps %3lld frames: %zu asked, %lld decoded, "
        "%d seek(s), %.2f ms\n",
        name.c_str(), v.info.codec.c_str(), v.info.width, v.info.height, v.info.fps,
        static_cast<long long>(v.info.frames), idx.size(), static_cast<long long>(v.frames_decoded),
        v.seeks, v.decode_ns / 1e6);
    seeks += v.seeks;
  }
  EXPECT_GT(seeks, 10);  // the GOP-12 clips are read by seeking
}
