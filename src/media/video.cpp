// Video files from memory through libavformat 5.1: the container, the header checks made before
// any frame is decoded, and the demux pass that counts frames. Decoding, seeking and the colour
// conversion are in video_decode.cpp.
//
// Input. libavformat reads the caller's span through a custom AVIOContext (read and seek
// callbacks, AVSEEK_SIZE answered); there is no file, URL or protocol behind it. Demuxers that
// open other resources (HLS and DASH playlists, ffconcat scripts, image sequences, a MOV's
// external data references) are shut out three ways: only the MP4/MOV, Matroska/WebM and AVI
// demuxers are accepted (the format is probed first, so a refused one is named), the context's
// protocol whitelist is empty, and its io_open callback refuses every URL.
//
// Header only. avformat_find_stream_info is not called: it decodes frames of a size nobody has
// checked yet. The three accepted containers state the frame size, the codec and the frame rate
// in their headers (a stream whose header lacks one is refused, naming it); PyAV calls
// find_stream_info, which fills the average frame rate only where the demuxer left it unset, so
// the values agree (tests/media/test_video_ref.cpp checks it clip by clip).
//
// Frames. A frame is a packet of the video stream: H.264, HEVC, VP8, VP9 (a superframe is one
// packet), AV1 (a temporal unit), MPEG-1/2/4 and MJPEG in these containers carry one displayed
// frame per packet, so the count of a demux pass (no decoding) is the count the decoder will
// output for an undamaged file. Packets flagged for discarding (what an MP4 edit list cuts) and
// empty packets are not frames: libavcodec drops the former, and the latter are never sent.
//
// Logging. FFmpeg writes its warnings for damaged input to stderr through av_log. Its level and
// callback are process-wide (av_log_set_level / av_log_set_callback), so mmrt sets neither: the
// decoder's own messages are moved below the default level by the per-context
// AVCodecContext::log_level_offset, swscale's "deprecated pixel format" warning is avoided (see
// RgbConverter::prepare in video_decode.cpp), and what demuxers and parsers say about damaged
// input goes to stderr (the media worker's is /dev/null). Undamaged files print nothing. The
// first line av_log prints in a process also calls isatty(2), an ioctl(TCGETS) on descriptor 2.
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/mem.h>
}

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "core/error.h"
#include "media/image.h"
#include "media/video.h"
#include "media/video_internal.h"

namespace mmrt::media {
namespace detail {
namespace {

constexpr int kIoBufferBytes = 32 << 10;
constexpr int64_t kProbeBytes = 1 << 20;  // what format probing may read
constexpr int kMaxStreams = 128;          // streams a demuxer may create
constexpr double kMinFps = 0.01, kMaxFps = 1000.0;

struct Container {
  const char* av_name;  // AVInputFormat::name
  const char* label;
};
constexpr Container kContainers[] = {
    {"mov,mp4,m4a,3gp,3g2,mj2", "MP4/MOV"},
    {"matroska,webm", "Matroska/WebM"},
    {"avi", "AVI"},
};
constexpr const char* kContainerList = "MP4/MOV, Matroska/WebM, AVI";
constexpr const char* kFormatWhitelist = "mov,matroska,avi";

constexpr AVCodecID kCodecs[] = {AV_CODEC_ID_H264,       AV_CODEC_ID_HEVC,       AV_CODEC_ID_VP8,
                                 AV_CODEC_ID_VP9,        AV_CODEC_ID_AV1,        AV_CODEC_ID_MPEG4,
                                 AV_CODEC_ID_MPEG1VIDEO, AV_CODEC_ID_MPEG2VIDEO, AV_CODEC_ID_MJPEG};
constexpr const char* kCodecList =
    "h264, hevc, vp8, vp9, av1, mpeg4, mpeg1video, mpeg2video, mjpeg";

std::string fmt_seconds(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

std::string fmt_fps(double f) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g fps", f);
  return buf;
}

// ---------------------------------------------------------------- I/O over the span
int io_read(void* opaque, uint8_t* buf, int size) {
  auto& m = *static_cast<VideoInput::Memory*>(opaque);
  if (size <= 0) return AVERROR(EINVAL);
  if (m.pos < 0 || m.pos >= m.size) return AVERROR_EOF;
  const int64_t n = std::min<int64_t>(size, m.size - m.pos);
  std::memcpy(buf, m.data + m.pos, static_cast<size_t>(n));
  m.pos += n;
  return static_cast<int>(n);
}

int64_t io_seek(void* opaque, int64_t offset, int whence) {
  auto& m = *static_cast<VideoInput::Memory*>(opaque);
  whence &= ~AVSEEK_FORCE;
  if (whence == AVSEEK_SIZE) return m.size;
  int64_t base = 0;
  if (whence == SEEK_CUR)
    base = m.pos;
  else if (whence == SEEK_END)
    base = m.size;
  else if (whence != SEEK_SET)
    return AVERROR(EINVAL);
  // Offsets come from the file: refuse what would overflow or land before the start. A position
  // past the end is allowed (reads there are EOF), as for a file.
  if ((offset > 0 && base > std::numeric_limits<int64_t>::max() - offset) || base + offset < 0)
    return AVERROR(EINVAL);
  m.pos = base + offset;
  return m.pos;
}

// No demuxer may open anything: the one input is the caller's bytes.
int refuse_io_open(AVFormatContext*, AVIOContext**, const char*, int, AVDictionary**) {
  return AVERROR(EPERM);
}

// What a file that is not video is, when it is an image: said in the message, since the usual
// cause is a file given to the wrong option.
std::string not_video_hint(std::span<const uint8_t> bytes) {
  const ImageFormat f = detect_format(bytes);
  if (f == ImageFormat::kUnknown) return "";
  return ": the file is a " + std::string(format_name(f)) + " image, not a video";
}

void check_options(const VideoDecodeOptions& o) {
  if (o.max_bytes == 0) throw InvalidArgument("video: max_bytes must be positive");
  if (!(o.max_seconds > 0) || !std::isfinite(o.max_seconds))
    throw InvalidArgument("video: max_seconds must be a positive number");
  if (o.max_frames < 1) throw InvalidArgument("video: max_frames must be at least 1");
  if (o.max_side < 1) throw InvalidArgument("video: max_side must be at least 1");
  if (o.max_frame_pixels < 1) throw InvalidArgument("video: max_frame_pixels must be at least 1");
}

struct PacketFree {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};

}  // namespace

std::string av_error_text(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof buf);
  return buf;
}

void VideoInput::IoFree::operator()(AVIOContext* io) const {
  av_freep(&io->buffer);  // the current buffer (avio may have replaced the one allocated)
  avio_context_free(&io);
}

void VideoInput::FormatClose::operator()(AVFormatContext* f) const {
  avformat_close_input(&f);  // AVFMT_FLAG_CUSTOM_IO: leaves the AVIOContext alone
}

AVStream* VideoInput::stream() const {
  return fmt_->streams[stream_];
}

VideoInput::VideoInput(std::span<const uint8_t> bytes) {
  mem_ = Memory{bytes.data(), static_cast<int64_t>(bytes.size()), 0};
  auto* buf = static_cast<uint8_t*>(av_malloc(kIoBufferBytes));
  if (!buf) throw ResourceExhausted("video: out of memory for the read buffer");
  io_.reset(avio_alloc_context(buf, kIoBufferBytes, 0, &mem_, io_read, nullptr, io_seek));
  if (!io_) {
    av_free(buf);
    throw ResourceExhausted("video: out of memory for the read context");
  }

  // The container, from the bytes (no file name): named when it is not one of ours.
  const AVInputFormat* ifmt = nullptr;
  const int probed = av_probe_input_buffer2(io_.get(), &ifmt, "", nullptr, 0, kProbeBytes);
  if (probed < 0 || !ifmt)
    throw FormatError("video: unrecognised container" + not_video_hint(bytes) +
                      " (accepted: " + kContainerList + ")");
  const char* label = nullptr;
  for (const Container& c : kContainers)
    if (std::strcmp(ifmt->name, c.av_name) == 0) label = c.label;
  if (!label) {
    std::string hint = not_video_hint(bytes);
    if (hint.empty() && probed < AVPROBE_SCORE_RETRY)
      throw FormatError(std::string("video: unrecognised container (libavformat's best guess, '") +
                        ifmt->name + "', scores " + std::to_string(probed) +
                        " of 100; accepted: " + kContainerList + ")");
    if (hint.empty())
      hint = std::string(": the file is '") + ifmt->name + "'" +
             (ifmt->long_name ? std::string(" (") + ifmt->long_name + ")" : "") +
             ", not a video container";
    throw FormatError("video: unsupported container" + hint + " (accepted: " + kContainerList +
                      ")");
  }
  what_ = std::string("video (") + label + ")";

  AVFormatContext* f = avformat_alloc_context();
  if (!f) throw ResourceExhausted("video: out of memory for the demuxer");
  f->pb = io_.get();
  f->flags |= AVFMT_FLAG_CUSTOM_IO;
  f->io_open = refuse_io_open;
  f->probesize = kProbeBytes;
  f->max_analyze_duration = 5 * int64_t{AV_TIME_BASE};
  f->max_streams = kMaxStreams;
  f->protocol_whitelist = av_strdup("");
  f->format_whitelist = av_strdup(kFormatWhitelist);
  if (!f->protocol_whitelist || !f->format_whitelist) {
    avformat_free_context(f);
    throw ResourceExhausted("video: out of memory for the demuxer");
  }
  // On failure avformat_open_input frees the context (and sets f to null).
  const int opened = avformat_open_input(&f, "", ifmt, nullptr);
  if (opened < 0) {
    if (opened == AVERROR(ENOMEM))
      throw ResourceExhausted(what_ + ": out of memory reading the container's header");
    throw FormatError(what_ + ": cannot read the container's header (truncated or malformed: " +
                      av_error_text(opened) + ")");
  }
  fmt_.reset(f);

  int audio = 0, other = 0, covers = 0;
  for (unsigned i = 0; i < f->nb_streams; ++i) {
    AVStream* st = f->streams[i];
    const AVMediaType type = st->codecpar->codec_type;
    const bool cover = (st->disposition & AV_DISPOSITION_ATTACHED_PIC) != 0;
    if (type == AVMEDIA_TYPE_VIDEO && !cover && stream_ < 0)
      stream_ = static_cast<int>(i);
    else
      st->discard = AVDISCARD_ALL;  // the demuxer drops their packets
    audio += type == AVMEDIA_TYPE_AUDIO;
    covers += type == AVMEDIA_TYPE_VIDEO && cover;
    other += type != AVMEDIA_TYPE_AUDIO && type != AVMEDIA_TYPE_VIDEO;
  }
  if (stream_ < 0) {
    std::string has = std::to_string(audio) + " audio stream(s)";
    if (covers) has += ", " + std::to_string(covers) + " cover image(s)";
    if (other) has += ", " + std::to_string(other) + " other stream(s)";
    throw FormatError(what_ + ": no video stream (" +
                      (audio && !covers && !other ? "an audio-only file: " : "") + has + ")");
  }

  const AVCodecID id = stream()->codecpar->codec_id;
  const std::string codec = avcodec_get_name(id);
  if (id == AV_CODEC_ID_NONE)
    throw Unimplemented(what_ + ": the video stream's codec is unknown to libavcodec (supported: " +
                        kCodecList + ")");
  bool accepted = false;
  for (AVCodecID c : kCodecs) accepted |= c == id;
  if (!accepted)
    throw Unimplemented(what_ + ": video codec '" + codec +
                        "' is not supported (supported: " + kCodecList + ")");
  decoder_ = avcodec_find_decoder(id);
  if (!decoder_)
    throw Unimplemented(what_ + ": this libavcodec has no decoder for video codec '" + codec + "'");
  what_ = std::string("video (") + label + ", " + codec + ")";
}

VideoInput::~VideoInput() = default;

VideoIndex index_video(std::span<const uint8_t> bytes, const VideoDecodeOptions& opts,
                       bool keep_packets) {
  check_options(opts);
  if (bytes.size() > opts.max_bytes)
    throw ResourceExhausted("video: the file has " + std::to_string(bytes.size()) +
                            " bytes, over the limit of " + std::to_string(opts.max_bytes));
  if (bytes.empty()) throw FormatError("video: empty input (0 bytes)");
  VideoInput in(bytes);
  const std::string& what = in.what();
  AVStream* st = in.stream();
  const AVCodecParameters* par = st->codecpar;

  VideoIndex index;
  VideoInfo& info = index.info;
  info.container = in.format()->iformat->name;
  info.codec = avcodec_get_name(par->codec_id);
  info.width = par->width;
  info.height = par->height;
  // The frame size, from the header, before any decoder exists.
  const std::string size = std::to_string(par->width) + "x" + std::to_string(par->height);
  if (par->width <= 0 || par->height <= 0)
    throw FormatError(what + ": the container states no frame size (" + size + ")");
  if (par->width > opts.max_side || par->height > opts.max_side)
    throw ResourceExhausted(what + ": frames of " + size + ", over the limit of " +
                            std::to_string(opts.max_side) + " pixels per side");
  const uint64_t pixels = uint64_t(par->width) * uint64_t(par->height);
  if (pixels > opts.max_frame_pixels)
    throw ResourceExhausted(what + ": frames of " + size + " (" + std::to_string(pixels) +
                            " pixels), over the limit of " + std::to_string(opts.max_frame_pixels));

  // The frame rate: PyAV's average_rate, else the container's base rate.
  AVRational rate = st->avg_frame_rate;
  if (rate.num <= 0 || rate.den <= 0) rate = st->r_frame_rate;
  if (rate.num <= 0 || rate.den <= 0)
    throw FormatError(what + ": the container states no frame rate");
  info.fps = av_q2d(rate);
  if (!(info.fps >= kMinFps && info.fps <= kMaxFps))
    throw FormatError(what + ": frame rate " + std::to_string(rate.num) + "/" +
                      std::to_string(rate.den) + " (" + fmt_fps(info.fps) +
                      ") is outside 0.01..1000 fps");

  // The duration the header states, before the demux pass.
  double stated = -1;
  if (st->duration > 0 && st->duration != AV_NOPTS_VALUE && st->time_base.num > 0 &&
      st->time_base.den > 0)
    stated = static_cast<double>(st->duration) * av_q2d(st->time_base);
  else if (in.format()->duration > 0 && in.format()->duration != AV_NOPTS_VALUE)
    stated = static_cast<double>(in.format()->duration) / AV_TIME_BASE;
  if (stated > opts.max_seconds)
    throw ResourceExhausted(what + ": the container states a duration of " + fmt_seconds(stated) +
                            ", over the limit of " + fmt_seconds(opts.max_seconds));

  // The demux pass: packets of the video stream, nothing decoded, stopped past the frame limit.
  std::unique_ptr<AVPacket, PacketFree> pkt(av_packet_alloc());
  if (!pkt) throw ResourceExhausted("video: out of memory for a packet");
  int64_t n = 0;
  for (;;) {
    const int r = av_read_frame(in.format(), pkt.get());
    if (r == AVERROR_EOF) break;
    if (r == AVERROR(ENOMEM))
      throw ResourceExhausted(what + ": out of memory reading packet " + std::to_string(n));
    if (r < 0)
      throw FormatError(what + ": the container is damaged after " + std::to_string(n) +
                        " video packets (" + av_error_text(r) + ")");
    if (pkt->stream_index == in.stream_index() && pkt->size > 0 &&
        !(pkt->flags & AV_PKT_FLAG_DISCARD)) {
      if (++n > opts.max_frames)
        throw ResourceExhausted(what + ": more than " + std::to_string(opts.max_frames) +
                                " frames, the limit");
      if (keep_packets)
        index.packets.push_back(VideoPacket{pkt->pts, (pkt->flags & AV_PKT_FLAG_KEY) != 0,
                                            (pkt->flags & AV_PKT_FLAG_CORRUPT) != 0});
    }
    av_packet_unref(pkt.get());
  }
  if (n == 0) throw FormatError(what + ": the video stream has no frames");
  info.frames = n;
  info.seconds = static_cast<double>(n) / info.fps;
  if (info.seconds > opts.max_seconds)
    throw ResourceExhausted(what + ": the video lasts " + fmt_seconds(info.seconds) + " (" +
                            std::to_string(n) + " frames at " + fmt_fps(info.fps) +
                            "), over the limit of " + fmt_seconds(opts.max_seconds));
  return index;
}

}  // namespace detail

VideoInfo probe_video(std::span<const uint8_t> bytes, const VideoDecodeOptions& opts) {
  return detail::index_video(bytes, opts, false).info;
}

}  // namespace mmrt::media
