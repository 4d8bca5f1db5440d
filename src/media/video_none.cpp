// Video decoding in a build without FFmpeg (MMRT_VIDEO=OFF, e.g. the GPU machine's pack, which
// has no FFmpeg libraries): every entry point refuses with the reason, so a video request gets a
// clear error and everything else serves as usual.
#include "core/error.h"
#include "media/video.h"

namespace mmrt::media {

namespace {

[[noreturn]] void no_video() {
  throw Unimplemented(
      "video input: this mmrt was built without video decoding (MMRT_VIDEO=OFF, no FFmpeg); "
      "images and audio are unaffected");
}

}  // namespace

VideoInfo probe_video(std::span<const uint8_t>, const VideoDecodeOptions&) {
  no_video();
}

VideoFrames decode_video_frames(std::span<const uint8_t>, std::span<const int64_t>,
                                const VideoDecodeOptions&, const MediaContext&) {
  no_video();
}

VideoFrames decode_picked_frames(std::span<const uint8_t>, const FramePicker&,
                                 const VideoDecodeOptions&, const MediaContext&) {
  no_video();
}

}  // namespace mmrt::media
