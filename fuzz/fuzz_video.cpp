// Video file bytes from the network or a user: container probe (MP4/MOV, Matroska/WebM, AVI),
// the header checks, the demux pass that counts frames, then the decode of the first frames and
// one further on (reached by seeking when the stream has key frames) to RGB. Any input may fail
// with an mmrt::Error; nothing may crash, leak, read out of bounds, overflow or decode past the
// limits. The input is the file itself (no mode byte), so a finding is a file the CLI can be
// given.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "core/error.h"
#include "media/video.h"

using namespace mmrt;

namespace {

// Tight limits keep each run short; the checks are the same as at the defaults.
constexpr media::VideoDecodeOptions kOpts{.max_bytes = 1u << 20,
                                          .max_seconds = 60.0,
                                          .max_frames = 300,
                                          .max_side = 1024,
                                          .max_frame_pixels = 1u << 18};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  media::VideoInfo info;
  try {
    info = media::probe_video(bytes, kOpts);
  } catch (const Error&) {
    return 0;
  }
  // What probe promises: a frame size, rate and count inside the limits.
  if (info.width < 1 || info.height < 1 || info.width > kOpts.max_side ||
      info.height > kOpts.max_side ||
      uint64_t(info.width) * uint64_t(info.height) > kOpts.max_frame_pixels)
    std::abort();
  if (info.frames < 1 || info.frames > kOpts.max_frames || !(info.fps > 0) ||
      info.seconds > kOpts.max_seconds)
    std::abort();
  std::vector<int64_t> idx = {0, 0, 1, 2};
  idx.push_back(std::min<int64_t>(info.frames - 1, 30));
  while (idx.back() >= info.frames) idx.pop_back();
  std::sort(idx.begin(), idx.end());
  try {
    const media::VideoFrames v = media::decode_video_frames(bytes, idx, kOpts);
    if (v.info.frames != info.frames || v.info.width != info.width ||
        v.info.height != info.height || v.frames.size() != idx.size())
      std::abort();
    for (const media::Image& im : v.frames)
      if (im.width() != info.width || im.height() != info.height) std::abort();
    // At most one seek back (then no more seeking) and one restart from frame 0.
    if (v.frames_decoded > info.frames * 3) std::abort();
  } catch (const Error&) {
  }
  return 0;
}
