// decode_video_frames: the decoder, seeking, and the conversion to RGB as PyAV makes it.
//
// Decoder. libavcodec's default decoder for the codec (libdav1d for AV1, as PyAV gets it), one
// thread (thread_count 1: the media worker's seccomp filter allows no thread creation),
// max_pixels at the frame limit (a stream that changes size mid-way cannot make it allocate
// more), its messages moved below the default log level through the per-context
// log_level_offset. Frames are numbered as they come out, in presentation order from 0, which is
// how PyAV's container.decode(video=0) (and torchvision's read_video) number them.
//
// Seeking. The demux pass records every counted packet's pts, in decode order. A key packet is a
// seek point when its pts is above every pts before it and below every pts after it in decode
// order (a closed GOP: no frame of the old GOP shows after it, no leading picture before it).
// For such a packet, its position in decode order is also its frame index. To reach frame t,
// when the seek point at or before t lies beyond the next packet to be read, the reader seeks
// there (av_seek_frame, AVSEEK_FLAG_BACKWARD, at its pts) and flushes the decoder. Nothing is
// taken on trust: the first packet after the seek must be a seek point at or before the one
// aimed at (it sets the index), and every decoded frame's pts must be the pts the table holds
// for its index. When either fails (a stream without timestamps, duplicate timestamps, a
// decoder that drops or adds frames), the reader starts again from frame 0 and decodes in
// order, counting frames as PyAV does: slower, never different.
//
// Colour. PyAV 10's frame.to_ndarray(format="rgb24") is VideoFrame.reformat: a
// sws_getCachedContext at the frame's size and pixel format to RGB24 at the same size with
// SWS_BILINEAR and no filters; no sws_setColorspaceDetails (source and destination colour spaces
// are both "default"), so swscale's own defaults hold (BT.601 coefficients, the range the pixel
// format implies) whatever the stream is tagged with; sws_scale into a buffer from
// av_image_alloc(..., align 16). The same context is made here (see RgbConverter::prepare for
// the full-range formats), and sws_scale writes into a buffer of the same layout,
// then copied row by row into the Image: the layout matters, since swscale's x86 YUV -> RGB
// converters work in blocks of 8 pixels where the stride leaves room for them (into a tight
// 3 * width stride, 760 bytes of a 322x182 frame come out different, at the ends of rows).
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "core/error.h"
#include "media/video.h"
#include "media/video_internal.h"

namespace mmrt::media {
namespace detail {
namespace {

struct CodecFree {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameFree {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketFree {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};

// Thrown inside this file only: a seek did not land where the table says, or a frame's
// timestamp disagrees with it. The reader then starts again from the beginning.
struct SeekWentWrong {};

// Where the reader may seek to (see the header comment).
struct SeekTable {
  bool usable = false;             // every packet has a pts and no two share one
  std::vector<int64_t> order_pts;  // the pts of frame i, presentation order
  std::vector<int64_t> points;     // decode positions of the seek points, ascending
  std::vector<int64_t> point_pts;  // their pts (ascending too)
};

SeekTable seek_table(const std::vector<VideoPacket>& p) {
  SeekTable t;
  const size_t n = p.size();
  t.order_pts.reserve(n);
  for (const VideoPacket& v : p) {
    if (v.pts == AV_NOPTS_VALUE) return {};
    t.order_pts.push_back(v.pts);
  }
  std::sort(t.order_pts.begin(), t.order_pts.end());
  if (std::adjacent_find(t.order_pts.begin(), t.order_pts.end()) != t.order_pts.end()) return {};
  std::vector<int64_t> suffix_min(n + 1, std::numeric_limits<int64_t>::max());
  for (size_t i = n; i-- > 0;) suffix_min[i] = std::min(suffix_min[i + 1], p[i].pts);
  int64_t prefix_max = std::numeric_limits<int64_t>::min();
  for (size_t i = 0; i < n; ++i) {
    if (p[i].key && !p[i].truncated && p[i].pts > prefix_max && p[i].pts < suffix_min[i + 1]) {
      t.points.push_back(static_cast<int64_t>(i));
      t.point_pts.push_back(p[i].pts);
    }
    prefix_max = std::max(prefix_max, p[i].pts);
  }
  t.usable = true;
  return t;
}

// The demuxer and decoder over the caller's bytes, handing out decoded frames with their index.
class FrameReader {
 public:
  FrameReader(std::span<const uint8_t> bytes, const VideoDecodeOptions& opts,
              const VideoIndex& index, const SeekTable& table)
      : bytes_(bytes), opts_(opts), index_(index), table_(table) {
    pkt_.reset(av_packet_alloc());
    if (!pkt_) throw ResourceExhausted("video: out of memory for a packet");
    open();
  }

  const std::string& what() const { return in_->what(); }
  int64_t next_packet() const { return next_pkt_; }
  int64_t next_index() const { return next_index_; }
  bool seeked() const { return seeked_; }
  int seeks() const { return seeks_; }
  int64_t truncated_at() const { return truncated_at_; }

  // From frame 0 again, with a new demuxer and decoder.
  void open() {
    cc_.reset();
    in_.reset();
    in_ = std::make_unique<VideoInput>(bytes_);
    const AVStream* st = in_->stream();
    cc_.reset(avcodec_alloc_context3(in_->decoder()));
    if (!cc_) throw ResourceExhausted("video: out of memory for the decoder");
    int r = avcodec_parameters_to_context(cc_.get(), st->codecpar);
    if (r < 0) throw ResourceExhausted(what() + ": cannot set up the decoder: " + av_error_text(r));
    cc_->thread_count = 1;
    cc_->max_pixels = static_cast<int64_t>(
        std::min<uint64_t>(opts_.max_frame_pixels, std::numeric_limits<int64_t>::max()));
    cc_->log_level_offset = AV_LOG_DEBUG - AV_LOG_ERROR;  // errors print as debug messages
    cc_->pkt_timebase = st->time_base;
    r = avcodec_open2(cc_.get(), in_->decoder(), nullptr);
    if (r < 0)
      throw FormatError(what() + ": the decoder refuses the stream's parameters (" +
                        av_error_text(r) + ")");
    next_pkt_ = next_index_ = 0;
    draining_ = seeked_ = false;
    landing_ = -1;
    truncated_at_ = -1;
  }

  // Seeks to the seek point at decode position k; the landing is checked on the first packet.
  void seek(int64_t k) {
    const int r = av_seek_frame(in_->format(), in_->stream_index(),
                                index_.packets[static_cast<size_t>(k)].pts, AVSEEK_FLAG_BACKWARD);
    if (r < 0) throw SeekWentWrong{};
    avcodec_flush_buffers(cc_.get());
    draining_ = false;
    truncated_at_ = -1;
    landing_ = k;
    before_seek_ = next_pkt_;
    seeked_ = true;
  }

  // A seek that landed before the packet the reader was at (on an earlier seek point: correct,
  // but it decodes again what was decoded). Seeking is then given up, so that a file whose
  // index sends every seek back to its start costs one more pass, not one per frame asked.
  bool seek_went_back() const { return went_back_; }

  // The next frame out of the decoder (into f) and its index; false at the end of the stream.
  bool next(AVFrame* f, int64_t& index) {
    for (;;) {
      const int r = avcodec_receive_frame(cc_.get(), f);
      if (r == 0) {
        index = next_index_++;
        return true;
      }
      if (r == AVERROR_EOF || (r == AVERROR(EAGAIN) && draining_)) return false;
      if (r != AVERROR(EAGAIN)) fail(r, "decoding frame " + std::to_string(next_index_));
      feed();
    }
  }

 private:
  [[noreturn]] void fail(int err, const std::string& doing) const {
    if (err == AVERROR(ENOMEM)) throw ResourceExhausted(what() + ": out of memory " + doing);
    throw FormatError(what() + ": damaged stream: " + doing + " failed (" + av_error_text(err) +
                      ")");
  }

  void drain() {
    const int r = avcodec_send_packet(cc_.get(), nullptr);
    if (r < 0 && r != AVERROR_EOF) fail(r, "flushing the decoder");
    draining_ = true;
  }

  // Sends the next packet of the video stream to the decoder (or the end of the stream).
  void feed() {
    AVPacket* p = pkt_.get();
    for (;;) {
      av_packet_unref(p);  // blank (a throw below may have left it holding a packet)
      const int r = av_read_frame(in_->format(), p);
      if (r == AVERROR_EOF) {
        if (landing_ >= 0) throw SeekWentWrong{};  // a seek past the last packet
        return drain();
      }
      if (r < 0) fail(r, "reading packet " + std::to_string(next_pkt_));
      if (p->stream_index != in_->stream_index() || p->size <= 0) {
        av_packet_unref(p);
        continue;
      }
      if (!(p->flags & AV_PKT_FLAG_DISCARD)) {
        if (landing_ >= 0) land(p->pts);
        if (p->flags & AV_PKT_FLAG_CORRUPT) {
          // Cut short (a truncated file): the frames before it are still complete.
          truncated_at_ = next_pkt_;
          av_packet_unref(p);
          return drain();
        }
        if (next_pkt_ >= index_.info.frames && seeked_) throw SeekWentWrong{};
        if (next_pkt_ >= index_.info.frames)
          throw FormatError(what() + ": the stream yields more packets than the " +
                            std::to_string(index_.info.frames) + " it was counted with");
        ++next_pkt_;
      }
      const int s = avcodec_send_packet(cc_.get(), p);
      av_packet_unref(p);
      if (s < 0) fail(s, "decoding packet " + std::to_string(next_pkt_ - 1));
      return;
    }
  }

  // The first packet after a seek: it must be a seek point at or before the one aimed at.
  void land(int64_t pts) {
    const auto& pp = table_.point_pts;
    const auto it = std::lower_bound(pp.begin(), pp.end(), pts);
    if (pts == AV_NOPTS_VALUE || it == pp.end() || *it != pts) throw SeekWentWrong{};
    const int64_t k = table_.points[static_cast<size_t>(it - pp.begin())];
    if (k > landing_) throw SeekWentWrong{};
    went_back_ |= k < before_seek_;
    next_pkt_ = next_index_ = k;
    landing_ = -1;
    ++seeks_;
  }

  std::span<const uint8_t> bytes_;
  const VideoDecodeOptions& opts_;
  const VideoIndex& index_;
  const SeekTable& table_;
  std::unique_ptr<VideoInput> in_;
  std::unique_ptr<AVCodecContext, CodecFree> cc_;
  std::unique_ptr<AVPacket, PacketFree> pkt_;
  int64_t next_pkt_ = 0;    // counted packets read (the decode position of the next)
  int64_t next_index_ = 0;  // the index of the next frame out of the decoder
  int64_t landing_ = -1;    // after a seek: the seek point aimed at, until the first packet
  int64_t truncated_at_ = -1;
  int64_t before_seek_ = 0;  // next_pkt_ when the last seek was made
  bool draining_ = false, seeked_ = false, went_back_ = false;
  int seeks_ = 0;
};

// Frames to RGB24 as PyAV's VideoFrame.reformat does (see the header comment).
class RgbConverter {
 public:
  RgbConverter(int width, int height, const std::string& what) : w_(width), h_(height) {
    if (av_image_alloc(data_, linesize_, w_, h_, AV_PIX_FMT_RGB24, 16) < 0)
      throw ResourceExhausted(what + ": out of memory for a " + std::to_string(w_) + "x" +
                              std::to_string(h_) + " RGB frame");
  }
  ~RgbConverter() {
    av_freep(&data_[0]);
    sws_freeContext(sws_);
  }
  RgbConverter(const RgbConverter&) = delete;
  RgbConverter& operator=(const RgbConverter&) = delete;

  Image convert(const AVFrame* f, const BufferCache& buffers, const std::string& what,
                int64_t index) {
    const auto fmt = static_cast<AVPixelFormat>(f->format);
    const char* name = av_get_pix_fmt_name(fmt);
    if (!prepare(fmt))
      throw Unimplemented(what + ": frame " + std::to_string(index) + " is in pixel format " +
                          (name ? name : "unknown") + ", which swscale cannot convert to RGB");
    const int rows = sws_scale(sws_, f->data, f->linesize, 0, f->height, data_, linesize_);
    if (rows != h_)
      throw FormatError(what + ": converting frame " + std::to_string(index) + " (" +
                        (name ? name : "unknown") + ") to RGB failed");
    Image im(w_, h_, buffers);
    for (int y = 0; y < h_; ++y)
      std::memcpy(im.row(y), data_[0] + static_cast<ptrdiff_t>(y) * linesize_[0], im.stride());
    return im;
  }

 private:
  // swscale's context for frames in pixel format `fmt`, made as sws_getCachedContext makes it
  // (kept while the format stays). The deprecated full-range "J" formats (what MJPEG and
  // full-range H.264, as phones record it, decode to) are given as swscale's handle_jpeg turns
  // them: the limited-range twin, with the source range set to full. The conversion is the same
  // (test_video_ref checks it against PyAV bit for bit), without swscale's "deprecated pixel
  // format used" warning on stderr, whose av_log would also ask isatty(2) (an ioctl).
  bool prepare(AVPixelFormat fmt) {
    if (sws_ && fmt == fmt_) return true;
    sws_freeContext(sws_);
    sws_ = nullptr;
    fmt_ = fmt;
    AVPixelFormat src = fmt;
    int full = 1;
    switch (fmt) {
      case AV_PIX_FMT_YUVJ420P:
        src = AV_PIX_FMT_YUV420P;
        break;
      case AV_PIX_FMT_YUVJ411P:
        src = AV_PIX_FMT_YUV411P;
        break;
      case AV_PIX_FMT_YUVJ422P:
        src = AV_PIX_FMT_YUV422P;
        break;
      case AV_PIX_FMT_YUVJ444P:
        src = AV_PIX_FMT_YUV444P;
        break;
      case AV_PIX_FMT_YUVJ440P:
        src = AV_PIX_FMT_YUV440P;
        break;
      default:
        full = 0;
    }
    SwsContext* c = sws_alloc_context();
    if (!c) throw ResourceExhausted("video: out of memory for the colour converter");
    const bool set =
        av_opt_set_int(c, "srcw", w_, 0) >= 0 && av_opt_set_int(c, "srch", h_, 0) >= 0 &&
        av_opt_set_int(c, "src_format", src, 0) >= 0 &&
        av_opt_set_int(c, "src_range", full, 0) >= 0 && av_opt_set_int(c, "dstw", w_, 0) >= 0 &&
        av_opt_set_int(c, "dsth", h_, 0) >= 0 &&
        av_opt_set_int(c, "dst_format", AV_PIX_FMT_RGB24, 0) >= 0 &&
        av_opt_set_int(c, "sws_flags", SWS_BILINEAR, 0) >= 0;
    if (!set || sws_init_context(c, nullptr, nullptr) < 0) {
      sws_freeContext(c);
      return false;
    }
    sws_ = c;
    return true;
  }

  int w_, h_;
  uint8_t* data_[4] = {};
  int linesize_[4] = {};
  SwsContext* sws_ = nullptr;
  AVPixelFormat fmt_ = AV_PIX_FMT_NONE;
};

void check_indices(std::span<const int64_t> indices, const VideoDecodeOptions& opts) {
  if (indices.size() > static_cast<uint64_t>(std::max<int64_t>(opts.max_frames, 0)))
    throw InvalidArgument("video: " + std::to_string(indices.size()) +
                          " frames asked, more than max_frames (" +
                          std::to_string(opts.max_frames) + ")");
  for (size_t j = 0; j < indices.size(); ++j) {
    if (indices[j] < 0)
      throw InvalidArgument("video: frame index " + std::to_string(indices[j]) + " (position " +
                            std::to_string(j) + ") is negative");
    if (j > 0 && indices[j] < indices[j - 1])
      throw InvalidArgument("video: frame indices must be ascending: frame " +
                            std::to_string(indices[j]) + " (position " + std::to_string(j) +
                            ") comes after frame " + std::to_string(indices[j - 1]));
  }
}

}  // namespace
}  // namespace detail

VideoFrames decode_video_frames(std::span<const uint8_t> bytes, std::span<const int64_t> indices,
                                const VideoDecodeOptions& opts, const MediaContext& ctx) {
  detail::check_indices(indices, opts);  // before the file is read
  return decode_picked_frames(
      bytes, [&](const VideoInfo&) { return std::vector<int64_t>(indices.begin(), indices.end()); },
      opts, ctx);
}

VideoFrames decode_picked_frames(std::span<const uint8_t> bytes, const FramePicker& pick,
                                 const VideoDecodeOptions& opts, const MediaContext& ctx) {
  using namespace detail;
  const auto t0 = std::chrono::steady_clock::now();
  const VideoIndex index = index_video(bytes, opts, true);
  const std::vector<int64_t> picked = pick(index.info);
  const std::span<const int64_t> indices = picked;
  check_indices(indices, opts);
  VideoFrames out;
  out.info = index.info;
  const VideoInfo& info = out.info;
  if (!indices.empty() && indices.back() >= info.frames)
    throw InvalidArgument("video: frame " + std::to_string(indices.back()) +
                          " was asked, the video has " + std::to_string(info.frames) +
                          " frames (0.." + std::to_string(info.frames - 1) + ")");
  if (indices.empty()) return out;

  const SeekTable table = seek_table(index.packets);
  bool may_seek = table.usable && !table.points.empty();
  bool check_pts = table.usable;
  FrameReader reader(bytes, opts, index, table);
  const std::string what = reader.what();
  RgbConverter rgb(info.width, info.height, what);
  std::unique_ptr<AVFrame, FrameFree> frame(av_frame_alloc());
  if (!frame) throw ResourceExhausted("video: out of memory for a frame");
  out.frames.reserve(indices.size());

  for (size_t j = 0; j < indices.size(); ++j) {
    const int64_t want = indices[j];
    if (j > 0 && want == indices[j - 1]) {
      out.frames.push_back(out.frames.back());
      continue;
    }
    for (bool done = false; !done;) {
      try {
        if (may_seek && !reader.seek_went_back()) {
          // The last seek point at or before the frame; worth it when not yet read.
          const auto it = std::upper_bound(table.points.begin(), table.points.end(), want);
          if (it != table.points.begin() && *(it - 1) > reader.next_packet())
            reader.seek(*(it - 1));
        }
        while (!done) {
          int64_t i = 0;
          if (!reader.next(frame.get(), i)) {
            std::string why;
            if (reader.truncated_at() >= 0)
              why = " (the file is cut short inside packet " +
                    std::to_string(reader.truncated_at()) + " of " + std::to_string(info.frames) +
                    ": truncated)";
            throw FormatError(what + ": the video ends at frame " +
                              std::to_string(reader.next_index()) + ", frame " +
                              std::to_string(want) + " was asked" + why);
          }
          ++out.frames_decoded;
          AVFrame* f = frame.get();
          if (check_pts) {
            const int64_t pts = f->pts != AV_NOPTS_VALUE ? f->pts : f->best_effort_timestamp;
            if (i >= static_cast<int64_t>(table.order_pts.size()) ||
                pts != table.order_pts[static_cast<size_t>(i)]) {
              if (reader.seeked()) throw SeekWentWrong{};
              check_pts = may_seek = false;  // decoding in order from 0: the count holds
            }
          }
          if (f->width != info.width || f->height != info.height)
            throw FormatError(what + ": frame " + std::to_string(i) + " is " +
                              std::to_string(f->width) + "x" + std::to_string(f->height) +
                              ", the stream's header says " + std::to_string(info.width) + "x" +
                              std::to_string(info.height));
          if ((f->flags & AV_FRAME_FLAG_CORRUPT) || f->decode_error_flags)
            throw FormatError(what + ": frame " + std::to_string(i) +
                              " is damaged (the decoder reports errors in it)");
          if (i > want) throw SeekWentWrong{};  // only after a seek: frame `want` was passed
          if (i == want) {
            out.frames.push_back(rgb.convert(f, ctx.buffers, what, i));
            done = true;
          }
          av_frame_unref(f);
        }
      } catch (const SeekWentWrong&) {
        reader.open();  // from frame 0, in order
        may_seek = check_pts = false;
        av_frame_unref(frame.get());
      }
    }
  }
  out.seeks = reader.seeks();
  out.decode_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  return out;
}

}  // namespace mmrt::media
