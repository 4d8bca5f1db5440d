// What video.cpp (container, header checks, the demux pass) and video_decode.cpp (decoder,
// seeking, colour conversion) share.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "media/video.h"

struct AVCodec;
struct AVFormatContext;
struct AVIOContext;
struct AVStream;

namespace mmrt::media::detail {

// The caller's bytes as a read-only, seekable AVIOContext and the demuxer reading them, with the
// first video stream selected (the others discarded, so the demuxer drops their packets).
// Opening reads the container's header only. FormatError for bytes that are not an accepted
// container or have no video stream; Unimplemented for a codec outside the accepted list or
// without a decoder in this libavcodec. Nothing here checks sizes, rates or counts.
class VideoInput {
 public:
  explicit VideoInput(std::span<const uint8_t> bytes);
  ~VideoInput();
  VideoInput(const VideoInput&) = delete;
  VideoInput& operator=(const VideoInput&) = delete;

  AVFormatContext* format() const { return fmt_.get(); }
  AVStream* stream() const;
  int stream_index() const { return stream_; }
  const AVCodec* decoder() const { return decoder_; }
  // "video (MP4/MOV, h264)": how messages name the file.
  const std::string& what() const { return what_; }

  // The read position: the AVIOContext's opaque, so its address must not change (the class
  // is neither copied nor moved).
  struct Memory {
    const uint8_t* data = nullptr;
    int64_t size = 0;
    int64_t pos = 0;
  };

 private:
  struct IoFree {
    void operator()(AVIOContext* io) const;
  };
  struct FormatClose {
    void operator()(AVFormatContext* f) const;
  };
  Memory mem_;
  std::unique_ptr<AVIOContext, IoFree> io_;  // destroyed after fmt_, which reads it
  std::unique_ptr<AVFormatContext, FormatClose> fmt_;
  int stream_ = -1;
  const AVCodec* decoder_ = nullptr;
  std::string what_;
};

// One packet of the video stream from the demux pass, in decode order.
struct VideoPacket {
  int64_t pts = 0;  // AV_NOPTS_VALUE when the container has none
  bool key = false;
  bool truncated = false;  // libavformat read fewer bytes than the container states
};

struct VideoIndex {
  VideoInfo info;
  std::vector<VideoPacket> packets;  // only when asked for
};

// The options' own ranges (InvalidArgument), the byte limit, the header checks and the demux pass
// counting the video stream's packets (packets libavformat flags for discarding, the parts an
// edit list cuts away, are not frames and not counted): everything probe_video does.
VideoIndex index_video(std::span<const uint8_t> bytes, const VideoDecodeOptions& opts,
                       bool keep_packets);

std::string av_error_text(int err);

}  // namespace mmrt::media::detail
