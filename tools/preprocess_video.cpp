// `mmrt preprocess --video FILE`: one video file -> Qwen2-VL pixel_values_videos /
// video_grid_thw .npy files (and the sampled frame indices), with the sampling plan and the time
// per stage.
#include "preprocess_video.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/npy.h"
#include "model_options.h"
#include "models/qwen2_vl/video_processor.h"

namespace mmrt::cli {

namespace fs = std::filesystem;
using namespace mmrt::models::qwen2_vl;

VideoSamplingConfig video_sampling_options(Args& args) {
  VideoSamplingConfig v;
  v.fps = args.get_double("video-fps", v.fps, 1e-3, 1000);
  v.nframes = args.get_int("video-nframes", 0, 0, 100000);
  v.min_frames = args.get_int("video-min-frames", v.min_frames, 1, 100000);
  v.max_frames = args.get_int("video-max-frames", v.max_frames, 1, 100000);
  v.min_pixels = args.get_int("video-min-pixels", v.min_pixels, 1, 1'000'000'000);
  v.max_pixels = args.get_int("video-max-pixels", v.max_pixels, 1, 1'000'000'000);
  v.total_pixels = args.get_int("video-total-pixels", v.total_pixels, 1, 1'000'000'000'000);
  const std::string r = args.get_or("video-frame-rounding", "round");
  if (r == "floor")
    v.rounding = VideoSamplingConfig::Rounding::kFloor;
  else if (r != "round")
    throw InvalidArgument(
        "--video-frame-rounding must be round (qwen-vl-utils 0.0.8) or floor "
        "(0.0.10 and later), got '" +
        r + "'");
  v.validate();
  return v;
}

models::MediaOptions video_request_options(Args& args) {
  models::MediaOptions o;
  o.video_prune_threshold = args.get_double("video-prune-threshold", 0.0, 0.0, 255.0);
  o.video_fps = args.get_double("video-fps", 0.0, 0.0, 1000);
  o.video_nframes = args.get_int("video-nframes", 0, 0, 100000);
  o.video_min_frames = args.get_int("video-min-frames", 0, 0, 100000);
  o.video_max_frames = args.get_int("video-max-frames", 0, 0, 100000);
  o.video_min_pixels = args.get_int("video-min-pixels", 0, 0, 1'000'000'000);
  o.video_max_pixels = args.get_int("video-max-pixels", 0, 0, 1'000'000'000);
  o.video_total_pixels = args.get_int("video-total-pixels", 0, 0, 1'000'000'000'000);
  try {
    models::validate(o);
  } catch (const Error& e) {
    throw InvalidArgument(std::string("--video-*: ") + e.what());
  }
  return o;
}

int run_preprocess_video(Args& args, const ImageProcessorConfig& pp, const std::string& video) {
  const auto out = args.get("out");
  const int64_t threads = args.get_int("threads", 1, 1, max_threads());
  const int64_t repeat = args.get_int("repeat", 1, 1, 1'000'000);
  const io::FileLimit limit = video_file_limit(args);
  const VideoSamplingConfig vc = video_sampling_options(args);
  const bool json = args.flag("json");
  const bool no_reuse = args.flag("no-frame-reuse");
  args.finish();

  VideoPreprocessOptions opts;
  opts.reuse_equal_frames = !no_reuse;
  opts.ctx.buffers = BufferCache::create();
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1) {
    pool = std::make_unique<ThreadPool>(static_cast<int>(threads));
    opts.ctx.pool = pool.get();
  }
  const std::vector<uint8_t> bytes = io::read_file_bytes(video, limit);
  const media::VideoInfo info = media::probe_video(bytes, opts.decode);
  const VideoPlan plan = plan_video(info, pp, vc);

  VideoInputs r;
  std::vector<double> decode, resize, patchify, total;
  for (int64_t i = 0; i < repeat; ++i) {
    Stopwatch sw;
    r = preprocess_video(bytes, pp, vc, opts);
    total.push_back(sw.millis());
    decode.push_back(r.decode_ms);
    resize.push_back(r.resize_ms);
    patchify.push_back(r.patchify_ms);
  }
  auto best = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  int64_t distinct = 0;
  for (size_t s = 0; s < r.first_equal_slice.size(); ++s)
    distinct += r.first_equal_slice[s] == static_cast<int64_t>(s);
  if (json) {
    std::printf(
        "{\"video\": \"%s\", \"container\": \"%s\", \"codec\": \"%s\", \"source\": [%d, %d], "
        "\"frames\": %lld, \"fps\": %.6f, \"sampled\": %zu, \"sample_fps\": %.6f, "
        "\"resized\": [%lld, %lld], \"grid_thw\": [%lld, %lld, %lld], \"tokens\": %lld, "
        "\"distinct_slices\": %lld, \"frames_reused\": %lld, \"repeat\": %lld, "
        "\"best_ms\": {\"decode\": %.4f, \"resize\": %.4f, \"patchify\": %.4f, \"total\": %.4f}}\n",
        fs::path(video).filename().string().c_str(), info.container.c_str(), info.codec.c_str(),
        info.width, info.height, static_cast<long long>(info.frames), info.fps, plan.indices.size(),
        plan.sample_fps, static_cast<long long>(plan.resized_width),
        static_cast<long long>(plan.resized_height), static_cast<long long>(r.grid[0]),
        static_cast<long long>(r.grid[1]), static_cast<long long>(r.grid[2]),
        static_cast<long long>(r.n_tokens()), static_cast<long long>(distinct),
        static_cast<long long>(r.frames_reused), static_cast<long long>(repeat), best(decode),
        best(resize), best(patchify), best(total));
  } else {
    std::printf("video     %s: %s, %s %dx%d, %lld frames at %.3f fps (%.2f s), %zu bytes\n",
                video.c_str(), info.container.c_str(), info.codec.c_str(), info.width, info.height,
                static_cast<long long>(info.frames), info.fps, info.seconds, bytes.size());
    std::printf("sampled   %zu frames (%.3f fps): first %lld, last %lld\n", plan.indices.size(),
                plan.sample_fps, static_cast<long long>(plan.indices.front()),
                static_cast<long long>(plan.indices.back()));
    std::printf(
        "resized   %lldx%lld (torchvision bicubic) -> grid_thw [%lld, %lld, %lld], %lld tokens; "
        "%lld of %lld slices distinct, %lld frames not resized again\n",
        static_cast<long long>(plan.resized_width), static_cast<long long>(plan.resized_height),
        static_cast<long long>(r.grid[0]), static_cast<long long>(r.grid[1]),
        static_cast<long long>(r.grid[2]), static_cast<long long>(r.n_tokens()),
        static_cast<long long>(distinct), static_cast<long long>(r.grid[0]),
        static_cast<long long>(r.frames_reused));
    std::printf(
        "%-9s decode %.2f ms | resize %.2f ms | normalize+patchify %.2f ms | total %.2f ms\n",
        repeat > 1 ? "best" : "time", best(decode), best(resize), best(patchify), best(total));
  }
  if (out) {
    const std::string pv = *out + ".pixel_values_videos.npy", gr = *out + ".video_grid_thw.npy",
                      ix = *out + ".frame_indices.npy";
    io::write_npy(pv, r.pixel_values_videos);
    Tensor g = Tensor::empty(DType::kI64, {1, 3});
    for (int k = 0; k < 3; ++k) g.data<int64_t>()[k] = r.grid[static_cast<size_t>(k)];
    io::write_npy(gr, g);
    Tensor idx = Tensor::empty(DType::kI64, {static_cast<int64_t>(plan.indices.size())});
    std::copy(plan.indices.begin(), plan.indices.end(), idx.data<int64_t>());
    io::write_npy(ix, idx);
    if (!json) std::printf("wrote     %s, %s, %s\n", pv.c_str(), gr.c_str(), ix.c_str());
  }
  return 0;
}

}  // namespace mmrt::cli
