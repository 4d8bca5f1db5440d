// Decoding video files to 8-bit RGB frames with FFmpeg 5.1 (libavformat, libavcodec, libswscale):
// MP4/MOV, Matroska/WebM and AVI (recognised from the bytes; other formats, image files and
// playlists are refused, naming what they are) with H.264, HEVC, VP8, VP9, AV1 (libdav1d),
// MPEG-1/2/4 part 2 and MJPEG. Everything reads from memory through a custom AVIOContext (no
// file, no network, no demuxer may open another URL: the media worker runs this under its seccomp
// allow-list), with one decoder thread. Frames are numbered as `torchvision.io.read_video` /
// PyAV number them: the decoded frames of the first video stream (cover images aside) in
// presentation order, from 0. The header is checked against the limits before any frame is
// decoded; every problem with the input is thrown as a core/error.h type naming it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "media/image.h"

namespace mmrt::media {

struct VideoDecodeOptions {
  uint64_t max_bytes = 512ull << 20;  // refuse larger files (ResourceExhausted)
  double max_seconds = 3600.0;        // refuse longer streams (ResourceExhausted), from the header
  int64_t max_frames = 200'000;       // refuse streams with more frames (ResourceExhausted)
  int max_side = 8192;                // refuse a wider or taller frame (ResourceExhausted)
  uint64_t max_frame_pixels = 36'000'000;  // refuse larger frames (ResourceExhausted)
};

struct VideoInfo {
  // libavformat's short name: "mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm" or "avi".
  std::string container;
  std::string codec;  // libavcodec's name of the codec, e.g. "h264", "vp9", "av1"
  int width = 0, height = 0;
  // The stream's average frame rate (PyAV's `average_rate`, torchvision's info["video_fps"]), else
  // its base rate (r_frame_rate) where the container states no average; 0.01..1000.
  double fps = 0;
  // Frames of the stream, counted from its packets (demuxing only, nothing decoded): what
  // read_video returns for an undamaged file.
  int64_t frames = 0;
  double seconds = 0;  // frames / fps
};

// Opens the container, checks the limits and counts the video stream's packets; decodes nothing.
// FormatError for bytes no accepted demuxer recognises, a file without a video stream
// ("audio-only"), a header without a frame size or a usable frame rate, a stream without frames;
// Unimplemented for a codec outside the list above or without a decoder in this libavcodec;
// ResourceExhausted past a limit; InvalidArgument for options out of range.
VideoInfo probe_video(std::span<const uint8_t> bytes, const VideoDecodeOptions& opts = {});

struct VideoFrames {
  VideoInfo info;
  std::vector<Image> frames;   // one per requested index, in the order asked
  int64_t decode_ns = 0;       // demux + decode + colour conversion
  int64_t frames_decoded = 0;  // frames the decoder output (requested or passed over)
  int seeks = 0;               // seeks made (each landed on a key frame)
};

// Decodes the frames with the given indices (ascending, repeats allowed, each < info.frames, at
// most opts.max_frames of them) to RGB at the stream's size, bit for bit as PyAV's
// `frame.to_ndarray(format="rgb24")` converts them. Only the requested frames are
// colour-converted; where the next requested frame lies beyond the next key frame, the decoder
// seeks to the key frame before it instead of decoding the gap (checked: a seek that does not
// land as the demux pass predicts falls back to decoding from frame 0, with the same result).
// FormatError for a stream that is damaged or ends before an index (truncated files);
// InvalidArgument for indices out of order or out of range.
VideoFrames decode_video_frames(std::span<const uint8_t> bytes, std::span<const int64_t> indices,
                                const VideoDecodeOptions& opts = {}, const MediaContext& ctx = {});

// The same with the indices chosen from the stream's info (what probe_video returns) by `pick`,
// from the one demux pass the decode makes anyway: a caller that samples frames from the frame
// count and rate needs no probe_video of its own.
using FramePicker = std::function<std::vector<int64_t>(const VideoInfo&)>;
VideoFrames decode_picked_frames(std::span<const uint8_t> bytes, const FramePicker& pick,
                                 const VideoDecodeOptions& opts = {}, const MediaContext& ctx = {});

}  // namespace mmrt::media
