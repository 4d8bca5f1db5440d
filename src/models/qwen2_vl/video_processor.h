// Qwen2-VL video preprocessing as qwen-vl-utils (`fetch_video`) and the HF image processor do
// it: the frame count (`smart_nframes`, FPS 2, FRAME_FACTOR 2, the 0.0.8 rounding or the newer
// floor rule), the frame indices of torch's float32 linspace rounded half to even, the
// per-frame pixel budget, smart_resize, torchvision's float bicubic resize for frames read from
// a file (media/resize_torch.h; frame lists go through the PIL-exact image path), then the
// image processor's rescale + normalise and the patchify of 2-frame slices into
// pixel_values_videos [grid_t * grid_h * grid_w, 1176] (odd frame counts repeat the last frame).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/hash.h"
#include "core/tensor.h"
#include "media/video.h"
#include "models/qwen2_vl/config.h"
#include "models/qwen2_vl/image_processor.h"

namespace mmrt::models::qwen2_vl {

// qwen-vl-utils' video settings (its module constants and the per-video keys of a message).
struct VideoSamplingConfig {
  double fps = 2.0;          // FPS: frames sampled per second of video
  int64_t frame_factor = 2;  // FRAME_FACTOR (= temporal_patch_size)
  int64_t min_frames = 4;    // FPS_MIN_FRAMES
  int64_t max_frames = 768;  // FPS_MAX_FRAMES
  int64_t nframes = 0;       // "nframes": a fixed frame count instead of fps (0: from fps)
  int64_t min_pixels = 128 * 28 * 28;      // VIDEO_MIN_PIXELS
  int64_t max_pixels = 768 * 28 * 28;      // VIDEO_MAX_PIXELS (the per-frame cap)
  int64_t total_pixels = 24576 * 28 * 28;  // VIDEO_TOTAL_PIXELS (0.0.8; later 128000 * 28² * 0.9)
  // kRound: 0.0.8, round_by_factor (half to even) after clamping to [min_frames, max_frames];
  // kFloor: 0.0.10+, floor_by_factor(min(n, total_frames)).
  enum class Rounding : uint8_t { kRound, kFloor };
  Rounding rounding = Rounding::kRound;
  // Frame lists (a list of images) use the image budgets instead (MIN_PIXELS, MAX_PIXELS).
  int64_t image_min_pixels = 4 * 28 * 28, image_max_pixels = 16384 * 28 * 28;

  // InvalidArgument naming the field for a value out of range.
  void validate() const;
};

// smart_nframes: the number of frames to sample from a video of `total_frames` at `video_fps`.
// InvalidArgument (as qwen-vl-utils' ValueError) when it is not within [frame_factor,
// total_frames], e.g. for a 1-frame video.
int64_t smart_nframes(int64_t total_frames, double video_fps, const VideoSamplingConfig& cfg);

// torch.linspace(0, total_frames - 1, n) in float32, rounded half to even: torch's AVX2 CPU
// kernel bit for bit (8-wide vectors, two per step; the chunk base and the scalar tail with a
// fused multiply-add, the lanes with a separate multiply and add), which is what torch runs on
// any x86-64 CPU with AVX2.
std::vector<int64_t> sample_frame_indices(int64_t total_frames, int64_t n);

// qwen-vl-utils' smart_resize (0.0.8, with the later max(factor, .) guards so no side is 0):
// the budgets are doubles because fetch_video's max_pixels is total_pixels / n * 2.
ResizedSize video_smart_resize(int64_t height, int64_t width, int64_t factor, double min_pixels,
                               double max_pixels);

// Everything decided from the header: frames, indices and the resized size.
struct VideoPlan {
  media::VideoInfo info;
  std::vector<int64_t> indices;  // frames to decode (their count is the sampled frame count)
  double sample_fps = 0;         // n / total_frames * video_fps
  // qwen-vl-utils' size (torchvision's resize of the decoded frames) and the size after the
  // image processor's own smart_resize (PIL bicubic; the same unless the checkpoint's budgets
  // are tighter).
  int64_t fetched_height = 0, fetched_width = 0;
  int64_t resized_height = 0, resized_width = 0;
  GridThw grid;  // (t, h, w) of pixel_values_videos: t = ceil(n / 2)
  int64_t n_tokens(int64_t merge_size) const {
    return grid[0] * grid[1] * grid[2] / (merge_size * merge_size);
  }
};
VideoPlan plan_video(const media::VideoInfo& info, const ImageProcessorConfig& pp,
                     const VideoSamplingConfig& vc);

struct VideoInputs {
  Tensor pixel_values_videos;  // [grid_t * grid_h * grid_w, C * T * p * p] f32
  GridThw grid;
  double sample_fps = 0;
  int64_t merge_size = 2;
  int64_t n_tokens() const { return grid[0] * grid[1] * grid[2] / (merge_size * merge_size); }
  // Exact temporal reuse: frames whose decoded pixels equal an earlier frame's were not
  // resized again; slices[i] is the first slice with pixels identical to slice i (i itself when
  // it is new): slices encode independently, so equal slices have equal encoder outputs.
  std::vector<int64_t> first_equal_slice;
  int64_t frames_reused = 0;  // sampled frames whose resize was skipped
  double decode_ms = 0, resize_ms = 0, patchify_ms = 0;
};

struct VideoPreprocessOptions {
  media::VideoDecodeOptions decode;
  MediaContext ctx;
  bool reuse_equal_frames = true;  // the exact tier (identical output either way)
};

// A video file: plan, decode the sampled frames, resize (torchvision's float bicubic), patchify.
VideoInputs preprocess_video(std::span<const uint8_t> bytes, const ImageProcessorConfig& pp,
                             const VideoSamplingConfig& vc,
                             const VideoPreprocessOptions& opts = {});

// A frame list: each frame through the image path (smart_resize with the image budgets, PIL
// bicubic), the list padded to a multiple of frame_factor with its last frame. InvalidArgument
// for an empty list or frames that resize to different sizes.
VideoInputs preprocess_video_frames(std::span<const Image> frames, const ImageProcessorConfig& pp,
                                    const VideoSamplingConfig& vc, const MediaContext& ctx = {});

// pixel_values_videos of already resized frames (all the same size, a multiple of the factor);
// an odd count repeats the last frame.
Tensor patchify_video(std::span<const Image* const> frames, const ImageProcessorConfig& pp,
                      const MediaContext& ctx = {});

// Hash of the video settings for content keys.
void hash_video_settings(Hasher& h, const VideoSamplingConfig& vc);

}  // namespace mmrt::models::qwen2_vl
