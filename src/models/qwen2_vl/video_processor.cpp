// Qwen2-VL video preprocessing: qwen-vl-utils' sampling and sizing rules, decoding through
// media/video.h, torchvision's resize (media/resize_torch.h), the image processor's second
// smart_resize (a no-op unless the checkpoint's budgets are tighter) and the slice patchify.
#include "models/qwen2_vl/video_processor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "core/clock.h"
#include "core/error.h"
#include "media/resize.h"
#include "media/resize_torch.h"

namespace mmrt::models::qwen2_vl {

namespace {

// Python's round(x / f) * f (half to even), math.ceil and math.floor variants.
int64_t round_by(double x, int64_t f) {
  return static_cast<int64_t>(std::nearbyint(x / static_cast<double>(f))) * f;
}
int64_t ceil_by(double x, int64_t f) {
  return static_cast<int64_t>(std::ceil(x / static_cast<double>(f))) * f;
}
int64_t floor_by(double x, int64_t f) {
  return static_cast<int64_t>(std::floor(x / static_cast<double>(f))) * f;
}

// qwen-vl-utils' VIDEO_MAX_PIXELS: the per-frame cap before a message's own max_pixels.
constexpr double kVideoMaxPixels = 768.0 * 28 * 28;

void check_range(const char* name, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi))
    throw InvalidArgument("video sampling: " + std::string(name) + " " + std::to_string(v) +
                          " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// The image processor's own smart_resize of an already sized frame (HF resizes every frame
// again with the checkpoint's budgets; usually the size is kept and PIL's resize is a copy).
ResizedSize processor_size(int64_t h, int64_t w, const ImageProcessorConfig& pp) {
  if (!pp.do_resize) return {h, w};
  return smart_resize(h, w, pp.factor(), pp.min_pixels, pp.max_pixels);
}

Image processor_resize(Image frame, const ImageProcessorConfig& pp, const MediaContext& ctx) {
  const ResizedSize rs = processor_size(frame.height(), frame.width(), pp);
  if (rs.height == frame.height() && rs.width == frame.width()) return frame;
  return media::resize(frame, static_cast<int>(rs.width), static_cast<int>(rs.height), pp.resample,
                       ctx);
}

// The slices of `frames` (indices into a table of distinct frames) and their patchify.
VideoInputs finish_video(std::span<const Image* const> distinct, std::span<const int64_t> order,
                         const ImageProcessorConfig& pp, const MediaContext& ctx, VideoInputs r) {
  Stopwatch sw;
  std::vector<const Image*> frames;
  for (int64_t i : order) frames.push_back(distinct[static_cast<size_t>(i)]);
  const int64_t T = pp.temporal_patch_size;
  const int64_t slices = (static_cast<int64_t>(order.size()) + T - 1) / T;
  const Image& f0 = *frames[0];
  const int64_t gh = f0.height() / pp.patch_size, gw = f0.width() / pp.patch_size;
  const int64_t D = 3 * T * static_cast<int64_t>(pp.patch_size) * pp.patch_size;
  const int64_t rows = gh * gw;
  std::shared_ptr<uint8_t> mem =
      features_buffer(ctx, static_cast<size_t>(slices * rows * D) * sizeof(float));
  r.pixel_values_videos = Tensor::view(mem.get(), DType::kF32, {slices * rows, D}, mem);
  float* out = r.pixel_values_videos.data<float>();
  // A slice is its frames' distinct ids (the last frame repeats to fill it).
  std::vector<std::vector<int64_t>> ids(static_cast<size_t>(slices));
  r.first_equal_slice.assign(static_cast<size_t>(slices), 0);
  for (int64_t s = 0; s < slices; ++s) {
    auto& id = ids[static_cast<size_t>(s)];
    for (int64_t t = 0; t < T; ++t)
      id.push_back(
          order[static_cast<size_t>(std::min(s * T + t, static_cast<int64_t>(order.size()) - 1))]);
    int64_t first = s;
    for (int64_t q = 0; q < s; ++q)
      if (ids[static_cast<size_t>(q)] == id) {
        first = q;
        break;
      }
    r.first_equal_slice[static_cast<size_t>(s)] = first;
    float* dst = out + s * rows * D;
    if (first != s) {
      std::memcpy(dst, out + first * rows * D, static_cast<size_t>(rows * D) * sizeof(float));
      continue;
    }
    const int64_t b = s * T, e = std::min(b + T, static_cast<int64_t>(frames.size()));
    patchify_slice(std::span<const Image* const>(frames.data() + b, static_cast<size_t>(e - b)), pp,
                   dst, ctx);
  }
  r.grid = {slices, gh, gw};
  r.merge_size = pp.merge_size;
  r.patchify_ms = sw.millis();
  return r;
}

}  // namespace

void VideoSamplingConfig::validate() const {
  check_range("fps", fps, 1e-3, 1000);
  check_range("frame_factor", static_cast<double>(frame_factor), 1, 16);
  check_range("min_frames", static_cast<double>(min_frames), 1, 100000);
  check_range("max_frames", static_cast<double>(max_frames), 1, 100000);
  check_range("nframes", static_cast<double>(nframes), 0, 100000);
  check_range("min_pixels", static_cast<double>(min_pixels), 1, 1e9);
  check_range("max_pixels", static_cast<double>(max_pixels), 1, 1e9);
  check_range("total_pixels", static_cast<double>(total_pixels), 1, 1e12);
  check_range("image_min_pixels", static_cast<double>(image_min_pixels), 1, 1e9);
  check_range("image_max_pixels", static_cast<double>(image_max_pixels), 1, 1e9);
}

int64_t smart_nframes(int64_t total_frames, double video_fps, const VideoSamplingConfig& cfg) {
  const int64_t ff = cfg.frame_factor;
  if (total_frames < 1) throw InvalidArgument("the video has no frames");
  if (!(video_fps > 0)) throw InvalidArgument("the video has no frame rate");
  int64_t n;
  if (cfg.nframes > 0) {
    n = round_by(static_cast<double>(cfg.nframes), ff);
  } else {
    const double lo = static_cast<double>(ceil_by(static_cast<double>(cfg.min_frames), ff));
    const double hi = static_cast<double>(
        floor_by(static_cast<double>(std::min(cfg.max_frames, total_frames)), ff));
    const double want = static_cast<double>(total_frames) / video_fps * cfg.fps;
    if (cfg.rounding == VideoSamplingConfig::Rounding::kRound)
      n = round_by(std::min(std::max(want, lo), hi), ff);
    else
      n = floor_by(std::min(std::min(std::max(want, lo), hi), static_cast<double>(total_frames)),
                   ff);
  }
  if (n >= ff && n <= total_frames) return n;
  const std::string groups =
      "frames go to the model in groups of " + std::to_string(ff) + ", at least one group";
  if (cfg.nframes > 0 && n > total_frames)
    throw InvalidArgument("nframes " + std::to_string(cfg.nframes) +
                          " asks for more frames than the video's " + std::to_string(total_frames));
  if (cfg.nframes > 0)
    throw InvalidArgument("nframes " + std::to_string(cfg.nframes) + " rounds to " +
                          std::to_string(n) + " frames: " + groups);
  throw InvalidArgument(
      "the video has " + std::to_string(total_frames) + (total_frames == 1 ? " frame" : " frames") +
      (total_frames < ff ? "" : "; the sampling settings give " + std::to_string(n)) + ": " +
      groups);
}

std::vector<int64_t> sample_frame_indices(int64_t total_frames, int64_t n) {
  if (n < 1 || total_frames < 1)
    throw InvalidArgument("sample_frame_indices: " + std::to_string(n) + " of " +
                          std::to_string(total_frames) + " frames");
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (n == 1) return out;  // linspace of one step is its start
  const float start = 0.0f, end = static_cast<float>(total_frames - 1);
  const float step = (end - start) / static_cast<float>(n - 1);
  const int64_t half = n / 2;
  // The chunk base and the scalar tail: torch's `start + step * idx` / `end - step * (n-idx-1)`,
  // contracted to one rounding by the AVX2 build.
  auto base = [&](int64_t idx) {
    return idx < half ? std::fma(step, static_cast<float>(idx), start)
                      : std::fma(-step, static_cast<float>(n - idx - 1), end);
  };
  auto put = [&](int64_t i, float v) {
    out[static_cast<size_t>(i)] = static_cast<int64_t>(std::nearbyint(v));
  };
  // Vectorized<float> on AVX2 has 8 lanes and the loop stores two vectors per step while 16
  // values remain; the lanes are base + k * step with two roundings (Vectorized::arange).
  constexpr int64_t kLanes = 8;
  const int64_t vec_end = n / (2 * kLanes) * (2 * kLanes);
  int64_t i = 0;
  for (; i < vec_end; i += kLanes) {
    const float b = base(i);
    for (int64_t k = 0; k < kLanes; ++k) {
      const float lane = static_cast<float>(k) * step;
      put(i + k, b + lane);
    }
  }
  for (; i < n; ++i) put(i, base(i));
  return out;
}

ResizedSize video_smart_resize(int64_t height, int64_t width, int64_t factor, double min_pixels,
                               double max_pixels) {
  if (height < 1 || width < 1)
    throw InvalidArgument("smart_resize: frame size " + std::to_string(width) + "x" +
                          std::to_string(height) + " is not positive");
  const double h = static_cast<double>(height), w = static_cast<double>(width);
  if (std::max(h, w) / std::min(h, w) > 200)
    throw InvalidArgument("the video is " + std::to_string(width) + "x" + std::to_string(height) +
                          " (width x height): its aspect ratio is over the 200 the model accepts");
  int64_t hb = std::max(factor, round_by(h, factor));
  int64_t wb = std::max(factor, round_by(w, factor));
  if (static_cast<double>(hb * wb) > max_pixels) {
    const double beta = std::sqrt(h * w / max_pixels);
    hb = std::max(factor, floor_by(h / beta, factor));
    wb = std::max(factor, floor_by(w / beta, factor));
  } else if (static_cast<double>(hb * wb) < min_pixels) {
    const double beta = std::sqrt(min_pixels / (h * w));
    hb = ceil_by(h * beta, factor);
    wb = ceil_by(w * beta, factor);
  }
  return {hb, wb};
}

VideoPlan plan_video(const media::VideoInfo& info, const ImageProcessorConfig& pp,
                     const VideoSamplingConfig& vc) {
  vc.validate();
  VideoPlan p;
  p.info = info;
  const int64_t n = smart_nframes(info.frames, info.fps, vc);
  p.indices = sample_frame_indices(info.frames, n);
  p.sample_fps =
      static_cast<double>(n) / std::max(static_cast<double>(info.frames), 1e-6) * info.fps;
  // fetch_video: max(min(VIDEO_MAX_PIXELS, total_pixels / n * FRAME_FACTOR), int(min * 1.05)),
  // then a message's max_pixels can only lower it.
  double max_pixels = std::max(
      std::min(kVideoMaxPixels, static_cast<double>(vc.total_pixels) / static_cast<double>(n) *
                                    static_cast<double>(vc.frame_factor)),
      std::floor(static_cast<double>(vc.min_pixels) * 1.05));
  max_pixels = std::min(max_pixels, static_cast<double>(vc.max_pixels));
  ResizedSize rs = video_smart_resize(info.height, info.width, pp.factor(),
                                      static_cast<double>(vc.min_pixels), max_pixels);
  p.fetched_height = rs.height;
  p.fetched_width = rs.width;
  rs = processor_size(rs.height, rs.width, pp);
  p.resized_height = rs.height;
  p.resized_width = rs.width;
  const int64_t T = pp.temporal_patch_size;
  p.grid = {(n + T - 1) / T, rs.height / pp.patch_size, rs.width / pp.patch_size};
  return p;
}

VideoInputs preprocess_video(std::span<const uint8_t> bytes, const ImageProcessorConfig& pp,
                             const VideoSamplingConfig& vc, const VideoPreprocessOptions& opts) {
  Stopwatch sw;
  VideoPlan plan;  // from the decoder's own demux pass: the file is read once
  media::VideoFrames decoded = media::decode_picked_frames(
      bytes,
      [&](const media::VideoInfo& info) {
        plan = plan_video(info, pp, vc);
        return plan.indices;
      },
      opts.decode, opts.ctx);
  VideoInputs r;
  r.sample_fps = plan.sample_fps;
  r.decode_ms = sw.millis();
  sw.reset();
  // The exact tier's first half: a frame whose decoded pixels equal an earlier one's reuses its
  // resized image (the same index sampled twice, or a static scene).
  const int fw = static_cast<int>(plan.fetched_width), fh = static_cast<int>(plan.fetched_height);
  std::vector<Image> distinct;
  std::vector<int64_t> order;
  std::unordered_map<Hash128, size_t, Hash128Hasher> seen;  // key -> first source frame
  std::vector<int64_t> distinct_of(decoded.frames.size());
  for (size_t i = 0; i < decoded.frames.size(); ++i) {
    const Image& f = decoded.frames[i];
    if (opts.reuse_equal_frames) {
      const Hash128 k = hash128(f.data(), f.size_bytes());
      auto [it, fresh] = seen.emplace(k, i);
      if (!fresh && std::memcmp(decoded.frames[it->second].data(), f.data(), f.size_bytes()) == 0) {
        distinct_of[i] = distinct_of[it->second];
        order.push_back(distinct_of[i]);
        ++r.frames_reused;
        continue;
      }
    }
    distinct_of[i] = static_cast<int64_t>(distinct.size());
    order.push_back(distinct_of[i]);
    distinct.push_back(
        processor_resize(media::resize_like_torchvision(f, fw, fh, opts.ctx), pp, opts.ctx));
  }
  decoded.frames.clear();
  r.resize_ms = sw.millis();
  std::vector<const Image*> ptrs;
  for (const Image& d : distinct) ptrs.push_back(&d);
  return finish_video(ptrs, order, pp, opts.ctx, std::move(r));
}

VideoInputs preprocess_video_frames(std::span<const Image> frames, const ImageProcessorConfig& pp,
                                    const VideoSamplingConfig& vc, const MediaContext& ctx) {
  vc.validate();
  if (frames.empty()) throw InvalidArgument("a video frame list needs at least one frame");
  Stopwatch sw;
  std::vector<Image> resized;
  for (size_t i = 0; i < frames.size(); ++i) {
    const Image& f = frames[i];
    if (f.empty()) throw InvalidArgument("frame " + std::to_string(i) + " of the list is empty");
    const ResizedSize rs = video_smart_resize(f.height(), f.width(), pp.factor(),
                                              static_cast<double>(vc.image_min_pixels),
                                              static_cast<double>(vc.image_max_pixels));
    resized.push_back(
        processor_resize(media::resize(f, static_cast<int>(rs.width), static_cast<int>(rs.height),
                                       ResizeFilter::kBicubic, ctx),
                         pp, ctx));
    if (resized.back().width() != resized[0].width() ||
        resized.back().height() != resized[0].height())
      throw InvalidArgument(
          "frame " + std::to_string(i) + " of the list resizes to " +
          std::to_string(resized.back().width()) + "x" + std::to_string(resized.back().height()) +
          ", frame 0 to " + std::to_string(resized[0].width()) + "x" +
          std::to_string(resized[0].height()) + ": the frames of a video must share one size");
  }
  VideoInputs r;
  r.resize_ms = sw.millis();
  std::vector<int64_t> order;
  for (size_t i = 0; i < resized.size(); ++i) order.push_back(static_cast<int64_t>(i));
  // qwen-vl-utils pads the list to a multiple of FRAME_FACTOR with its last frame.
  while (static_cast<int64_t>(order.size()) % vc.frame_factor) order.push_back(order.back());
  std::vector<const Image*> ptrs;
  for (const Image& d : resized) ptrs.push_back(&d);
  return finish_video(ptrs, order, pp, ctx, std::move(r));
}

Tensor patchify_video(std::span<const Image* const> frames, const ImageProcessorConfig& pp,
                      const MediaContext& ctx) {
  if (frames.empty()) throw InvalidArgument("patchify_video: no frames");
  std::vector<int64_t> order;
  for (size_t i = 0; i < frames.size(); ++i) order.push_back(static_cast<int64_t>(i));
  return finish_video(frames, order, pp, ctx, VideoInputs{}).pixel_values_videos;
}

void hash_video_settings(Hasher& h, const VideoSamplingConfig& vc) {
  h.update_pod(vc.fps)
      .update_pod(vc.frame_factor)
      .update_pod(vc.min_frames)
      .update_pod(vc.max_frames)
      .update_pod(vc.nframes)
      .update_pod(vc.min_pixels)
      .update_pod(vc.max_pixels)
      .update_pod(vc.total_pixels)
      .update_pod(vc.rounding)
      .update_pod(vc.image_min_pixels)
      .update_pod(vc.image_max_pixels)
      .update(std::string_view("qwen-vl-utils video, torchvision resize"));
}

}  // namespace mmrt::models::qwen2_vl
