// Qwen2-VL video without a reference process (release and ASan+UBSan): smart_nframes' errors,
// the last frame repeated for odd frame counts, exact temporal reuse on a static clip (the
// preprocessing bookkeeping, and the runner's slice reuse bit-identical to encoding every slice),
// the processor's header estimate against what preprocessing produces, placeholder/item
// mismatches, and patchify of one frame against the image patchify. Clips are made with the
// ffmpeg CLI into a per-process folder (the tests that need one skip without it).
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>

#include "core/error.h"
#include "media/image.h"
#include "models/qwen2_vl/chat_template.h"
#include "models/qwen2_vl/processor.h"
#include "models/qwen2_vl/tiny_checkpoint.h"
#include "models/qwen2_vl/video_processor.h"
#include "models/registry.h"
#include "test_model.h"

namespace fs = std::filesystem;
using namespace mmrt;
using namespace mmrt::models;
using namespace mmrt::models::qwen2_vl;

namespace {

// The message of the InvalidArgument `f` throws ("" and a test failure when it throws none).
template <typename F>
std::string invalid_argument(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InvalidArgument";
  return "";
}

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << (text) << " lacks: " << (part)

media::Image random_image(int w, int h, uint32_t seed) {
  media::Image im(w, h);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < im.size_bytes(); ++i) im.data()[i] = static_cast<uint8_t>(rng());
  return im;
}

// Per-process folder with the clips (made once) and a tiny f32 checkpoint.
class Qwen2VLVideoUnit : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("mmrt_vlvideo_unit_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    have_ffmpeg_ = std::system("ffmpeg -version > /dev/null 2>&1") == 0;
    if (have_ffmpeg_) {
      // A static scene, lossless (every decoded frame equal), and a moving one of 35 frames.
      have_ffmpeg_ = clip("color=c=0x3366aa:s=64x48:r=10:d=2", "static.mp4") &&
                     clip("testsrc2=s=64x48:r=10:d=3.5", "odd.mp4");
    }
    TinyOptions o;
    o.dtype = DType::kF32;
    o.seed = 4;
    make_tiny_checkpoint(model().string(), o);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static bool clip(const std::string& graph, const std::string& name) {
    const std::string cmd = "ffmpeg -hide_banner -loglevel error -nostdin -y -f lavfi -i " + graph +
                            " -c:v libx264 -preset veryfast -qp 0 -pix_fmt yuv420p -threads 1 " +
                            (dir_ / name).string();
    return std::system(cmd.c_str()) == 0;
  }
  static std::vector<uint8_t> bytes(const std::string& name) {
    std::ifstream f(dir_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  static fs::path model() { return dir_ / "m"; }
  static fs::path dir_;
  static bool have_ffmpeg_;
};
fs::path Qwen2VLVideoUnit::dir_;
bool Qwen2VLVideoUnit::have_ffmpeg_ = false;

#define NEED_FFMPEG() \
  if (!have_ffmpeg_) GTEST_SKIP() << "the ffmpeg CLI (libx264) is needed to make the clips"

// Columns of temporal half t of channel c in a pixel_values row: ((c * T + t) * p + py) * p + px.
bool halves_equal(const float* row, const ImageProcessorConfig& pp) {
  const int64_t pp2 = int64_t(pp.patch_size) * pp.patch_size;
  for (int64_t c = 0; c < 3; ++c)
    if (std::memcmp(row + (c * 2) * pp2, row + (c * 2 + 1) * pp2, size_t(pp2) * 4) != 0)
      return false;
  return true;
}

}  // namespace

TEST(Qwen2VLVideoSampling, SmartNframesErrorsNameTheCounts) {
  const VideoSamplingConfig vc;
  // A 1-frame video: max_frames floors to 0, below FRAME_FACTOR (qwen-vl-utils' ValueError).
  std::string m = invalid_argument([&] { smart_nframes(1, 25.0, vc); });
  EXPECT_CONTAINS(m, "the video has 1 frame: frames go to the model in groups of 2");
  // A fixed nframes over the frame count, and one that rounds to no group.
  VideoSamplingConfig fixed;
  fixed.nframes = 10;
  m = invalid_argument([&] { smart_nframes(6, 25.0, fixed); });
  EXPECT_CONTAINS(m, "nframes 10 asks for more frames than the video's 6");
  EXPECT_EQ(smart_nframes(10, 25.0, fixed), 10);
  fixed.nframes = 1;
  m = invalid_argument([&] { smart_nframes(6, 25.0, fixed); });
  EXPECT_CONTAINS(m, "nframes 1 rounds to 0 frames: frames go to the model in groups of 2");
  // 0.0.8 rounds half to even after the clamp: 7 frames' worth (84 at 24 fps) -> 8, 5 (60 at
  // 24 fps) -> 4; the floor rule takes 6 and 4. The clamp to the frame count comes first.
  VideoSamplingConfig fl;
  fl.rounding = VideoSamplingConfig::Rounding::kFloor;
  EXPECT_EQ(smart_nframes(84, 24.0, vc), 8);
  EXPECT_EQ(smart_nframes(84, 24.0, fl), 6);
  EXPECT_EQ(smart_nframes(60, 24.0, vc), 4);
  EXPECT_EQ(smart_nframes(60, 24.0, fl), 4);
  EXPECT_EQ(smart_nframes(7, 2.0, vc), 6);
  EXPECT_EQ(smart_nframes(3, 2.0, vc), 2);
  EXPECT_CONTAINS(invalid_argument([&] { smart_nframes(0, 25.0, vc); }), "no frames");
  EXPECT_CONTAINS(invalid_argument([&] { smart_nframes(10, 0.0, vc); }), "frame rate");
  EXPECT_THROW(sample_frame_indices(10, 0), InvalidArgument);
  EXPECT_EQ(sample_frame_indices(10, 1), std::vector<int64_t>{0});
  EXPECT_EQ(sample_frame_indices(90, 6), (std::vector<int64_t>{0, 18, 36, 53, 71, 89}));
  // Settings out of range are named.
  VideoSamplingConfig bad;
  bad.frame_factor = 0;
  EXPECT_CONTAINS(invalid_argument([&] { bad.validate(); }), "frame_factor");
  media::VideoInfo info;
  info.width = 64;
  info.height = 48;
  info.fps = 10;
  info.frames = 20;
  EXPECT_CONTAINS(invalid_argument([&] { plan_video(info, {}, bad); }), "frame_factor");
  info.width = 201 * 48;
  EXPECT_CONTAINS(invalid_argument([&] { plan_video(info, {}, vc); }), "aspect ratio");
}

TEST(Qwen2VLVideoSampling, OddFrameCountRepeatsTheLastFrame) {
  const ImageProcessorConfig pp;
  const media::Image a = random_image(56, 56, 1), b = random_image(56, 56, 2),
                     c = random_image(56, 56, 3);
  const media::Image* three[] = {&a, &b, &c};
  const Tensor t = patchify_video(three, pp);
  const int64_t rows = 4 * 4;  // 4 x 4 patches a slice
  ASSERT_EQ(t.dim(0), 2 * rows);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_FALSE(halves_equal(t.data<float>() + r * t.dim(1), pp)) << "slice 0 row " << r;
    EXPECT_TRUE(halves_equal(t.data<float>() + (rows + r) * t.dim(1), pp)) << "slice 1 row " << r;
  }
  // The last slice is the 1-frame slice of c: the image patchify of c.
  const Tensor img = patchify(c, pp);
  EXPECT_EQ(std::memcmp(t.data<float>() + rows * t.dim(1), img.raw(), img.nbytes()), 0);
  // A frame list of 3 is padded with its last frame: the same tensor.
  const media::Image list[] = {a, b, c};
  VideoInputs v = preprocess_video_frames(list, pp, VideoSamplingConfig{});
  ASSERT_EQ(v.grid, (GridThw{2, 4, 4}));
  EXPECT_EQ(std::memcmp(v.pixel_values_videos.raw(), t.raw(), t.nbytes()), 0);
  EXPECT_THROW(preprocess_video_frames({}, pp, VideoSamplingConfig{}), InvalidArgument);
  const media::Image sizes[] = {random_image(56, 28, 4), random_image(112, 28, 5)};
  EXPECT_CONTAINS(invalid_argument([&] { preprocess_video_frames(sizes, pp, {}); }),
                  "share one size");
}

TEST(Qwen2VLVideoSampling, PatchifySliceOfOneFrameIsTheImagePatchify) {
  ImageProcessorConfig pp;
  for (auto [w, h] : {std::pair{56, 56}, std::pair{84, 56}, std::pair{28, 112}}) {
    const media::Image im = random_image(w, h, static_cast<uint32_t>(w * h));
    const Tensor img = patchify(im, pp);
    std::vector<float> out(static_cast<size_t>(img.numel()), -1.f);
    const media::Image* one[] = {&im};
    patchify_slice(one, pp, out.data());
    EXPECT_EQ(std::memcmp(out.data(), img.raw(), img.nbytes()), 0) << w << "x" << h;
    EXPECT_EQ(std::memcmp(patchify_video(one, pp).raw(), img.raw(), img.nbytes()), 0);
    const ImageInputs full = preprocess_image(im, pp);  // multiples of 28, >= min_pixels: kept
    EXPECT_EQ(std::memcmp(full.pixel_values.raw(), img.raw(), img.nbytes()), 0);
  }
}

TEST_F(Qwen2VLVideoUnit, OddClipRepeatsTheLastFrame) {
  NEED_FFMPEG();
  VideoSamplingConfig vc;
  vc.frame_factor = 1;  // 35 frames at 10 fps: 7 frames, so the 4th slice is one frame twice
  const ImageProcessorConfig pp;
  const VideoInputs v = preprocess_video(bytes("odd.mp4"), pp, vc);
  ASSERT_EQ(v.grid[0], 4);
  const int64_t rows = v.grid[1] * v.grid[2], D = v.pixel_values_videos.dim(1);
  const float* px = v.pixel_values_videos.data<float>();
  int64_t moving = 0;  // rows of the first slice whose frames (0 and 6) differ
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_TRUE(halves_equal(px + (3 * rows + r) * D, pp)) << "row " << r;
    moving += !halves_equal(px + r * D, pp);
  }
  EXPECT_GT(moving, 0);
  EXPECT_EQ(v.first_equal_slice, (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST_F(Qwen2VLVideoUnit, StaticClipReusesFramesAndSlices) {
  NEED_FFMPEG();
  const std::vector<uint8_t> clip = bytes("static.mp4");
  const ImageProcessorConfig pp;
  const VideoInputs v = preprocess_video(clip, pp, VideoSamplingConfig{});
  // 20 frames at 10 fps: 4 sampled, all equal: 2 equal slices.
  ASSERT_EQ(v.grid[0], 2);
  EXPECT_EQ(v.first_equal_slice, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(v.frames_reused, 3);
  VideoPreprocessOptions off;
  off.reuse_equal_frames = false;
  const VideoInputs plain = preprocess_video(clip, pp, VideoSamplingConfig{}, off);
  EXPECT_EQ(plain.frames_reused, 0);
  ASSERT_EQ(plain.pixel_values_videos.shape(), v.pixel_values_videos.shape());
  EXPECT_EQ(std::memcmp(plain.pixel_values_videos.raw(), v.pixel_values_videos.raw(),
                        v.pixel_values_videos.nbytes()),
            0);

  // The runner: reused slices vs every slice through the tower, bit for bit.
  LoadOptions on_opts, off_opts;
  off_opts.video_slice_reuse = false;
  Model on = load_model(test::test_backend(), model().string(), on_opts);
  Model every = load_model(test::test_backend(), model().string(), off_opts);
  const PreparedMedia item = on.processor->preprocess(Modality::kVideo, clip, {});
  const Tensor a = on.runner->encode(item);
  const Tensor b = every.runner->encode(item);
  ASSERT_EQ(a.dim(0), item.n_tokens);
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
  // Equal slices give equal rows.
  const int64_t per = item.n_tokens / 2;
  EXPECT_EQ(
      std::memcmp(a.data<float>(), a.data<float>() + per * a.dim(1), size_t(per * a.dim(1)) * 4),
      0);
  // In parts as the engine runs it (each slice's blocks and merger; the equal slice's parts run
  // nothing with reuse on): the same bits, with reuse on and off.
  const int64_t per_slice = on.spec.encoder_blocks + 1;
  test::expect_parts_equal_encode(*on.runner, item, a, 2 * per_slice);
  test::expect_parts_equal_encode(*every.runner, item, b, 2 * per_slice);
  // Pruned to tokens of the second slice: that slice's parts alone, its kept rows.
  PreparedMedia pruned = item;
  pruned.kept_tokens = {static_cast<int32_t>(per), static_cast<int32_t>(per + 2)};
  pruned.n_tokens = 2;
  const Tensor p = on.runner->encode(pruned);
  ASSERT_EQ(p.dim(0), 2);
  EXPECT_EQ(std::memcmp(p.data<float>(), a.data<float>() + per * a.dim(1), size_t(a.dim(1)) * 4),
            0);
  test::expect_parts_equal_encode(*on.runner, pruned, p, per_slice);
  // A features tensor that does not fit the grid is refused.
  PreparedMedia wrong = item;
  wrong.dims = {3, item.dims[1], item.dims[2]};
  wrong.n_tokens = item.n_tokens / 2 * 3;
  EXPECT_THROW(on.runner->encode(wrong), InvalidArgument);
}

TEST_F(Qwen2VLVideoUnit, EstimateEqualsPreprocess) {
  NEED_FFMPEG();
  const std::unique_ptr<Processor> proc = load_processor(model().string());
  for (const char* name : {"static.mp4", "odd.mp4"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> clip = bytes(name);
    const MediaEstimate e = proc->estimate(Modality::kVideo, clip);
    const PreparedMedia p = proc->preprocess(Modality::kVideo, clip, {});
    EXPECT_TRUE(e.exact);
    EXPECT_EQ(e.dims, p.dims);
    EXPECT_EQ(e.n_tokens, p.n_tokens);
    EXPECT_EQ(e.encoder_cost, p.encoder_cost);
    EXPECT_EQ(e.feature_bytes, static_cast<int64_t>(p.features.nbytes()));
    EXPECT_EQ(p.n_tokens, p.dims[0] * p.dims[1] * p.dims[2] / 4);
    EXPECT_GT(e.source_pixels, 0);
    // Content keys: video and image keys of the same bytes differ.
    EXPECT_NE(proc->content_key(Modality::kVideo, clip), proc->content_key(Modality::kImage, clip));
  }
  EXPECT_THROW(proc->estimate(Modality::kAudio, bytes("static.mp4")), Unimplemented);
}

// A request's sampling settings (MediaOptions.video_*) are qwen-vl-utils' per-message keys over
// the model's: the same clip as preprocess_video with that VideoSamplingConfig, a content key
// of its own, and budgets above the model's refused.
TEST_F(Qwen2VLVideoUnit, RequestSamplingOptionsActAsTheProcessorsOwn) {
  NEED_FFMPEG();
  const std::unique_ptr<Processor> proc = load_processor(model().string());
  const ImageProcessorConfig pp =
      ImageProcessorConfig::load((model() / "preprocessor_config.json").string());
  const std::vector<uint8_t> clip = bytes("odd.mp4");  // 35 frames at 10 fps
  MediaOptions six;
  six.video_nframes = 6;
  MediaOptions small;
  small.video_min_pixels = 56 * 56;
  small.video_max_pixels = 56 * 56;
  MediaOptions quick;
  quick.video_fps = 4;  // 3.5 s: 14 frames
  VideoSamplingConfig v6, vsmall, vquick;
  v6.nframes = 6;
  vsmall.min_pixels = vsmall.max_pixels = 56 * 56;
  vquick.fps = 4;
  const Hash128 base = proc->content_key(Modality::kVideo, clip);
  const std::tuple<MediaOptions, VideoSamplingConfig, int64_t> cases[] = {
      {six, v6, 3}, {small, vsmall, 4}, {quick, vquick, 7}};
  for (const auto& [opts, vc, t] : cases) {
    SCOPED_TRACE(t);
    const PreparedMedia p = proc->preprocess(Modality::kVideo, clip, {}, opts);
    const VideoInputs ref = preprocess_video(clip, pp, vc);
    EXPECT_EQ(p.dims[0], t);
    EXPECT_EQ(p.dims, (std::vector<int64_t>{ref.grid[0], ref.grid[1], ref.grid[2]}));
    ASSERT_EQ(p.features.nbytes(), ref.pixel_values_videos.nbytes());
    EXPECT_EQ(std::memcmp(p.features.raw(), ref.pixel_values_videos.raw(), p.features.nbytes()), 0);
    const MediaEstimate e = proc->estimate(Modality::kVideo, clip, opts);
    EXPECT_EQ(e.n_tokens, p.n_tokens);
    EXPECT_NE(proc->content_key(Modality::kVideo, clip, opts), base);
  }
  const PreparedMedia dflt = proc->preprocess(Modality::kVideo, clip, {});
  const PreparedMedia smaller = proc->preprocess(Modality::kVideo, clip, {}, small);
  EXPECT_LT(smaller.n_tokens, dflt.n_tokens);
  // Raising a budget is refused, naming the key; so are counts the model cannot sample.
  MediaOptions more;
  more.video_max_pixels = 10'000'000;
  EXPECT_CONTAINS(invalid_argument([&] { proc->preprocess(Modality::kVideo, clip, {}, more); }),
                  "video_max_pixels 10000000 is above the server's");
  more = {};
  more.video_nframes = 100'000;
  EXPECT_CONTAINS(invalid_argument([&] { proc->estimate(Modality::kVideo, clip, more); }),
                  "not raise them");
  more = {};
  more.video_nframes = 40;  // more frames than the clip's 35
  EXPECT_CONTAINS(invalid_argument([&] { proc->estimate(Modality::kVideo, clip, more); }),
                  "nframes 40 asks for more frames than the video's 35");
  // A maximum under the minimum: whose each one is (the request's, or the server's default).
  more = {};
  more.video_max_frames = 1;
  EXPECT_CONTAINS(invalid_argument([&] { proc->estimate(Modality::kVideo, clip, more); }),
                  "video_min_frames 4 (the server's) is above video_max_frames 1");
  more.video_min_frames = 3;
  more.video_max_frames = 2;
  EXPECT_CONTAINS(invalid_argument([&] { proc->estimate(Modality::kVideo, clip, more); }),
                  "video_min_frames 3 is above video_max_frames 2");
}

TEST(Qwen2VLVideoPrompt, PlaceholderAndItemMismatchesAreNamed) {
  Config cfg;
  const int32_t vs = static_cast<int32_t>(cfg.vision_start_token_id),
                ve = static_cast<int32_t>(cfg.vision_end_token_id),
                img = static_cast<int32_t>(cfg.image_token_id),
                vid = static_cast<int32_t>(cfg.video_token_id);
  const std::vector<int32_t> ids{1, vs, img, ve, 2, vs, vid, ve, 3};
  const MediaGrid image{Modality::kImage, {1, 4, 6}, 1.0};
  const MediaGrid video{Modality::kVideo, {3, 4, 4}, 1.0};
  const MediaGrid ok[] = {image, video};
  const MultimodalPrompt p = expand_media_prompt(ids, ok, cfg);
  ASSERT_EQ(p.items.size(), 2u);
  EXPECT_EQ(p.items[0].n_tokens, 6);
  EXPECT_EQ(p.items[1].n_tokens, 12);
  EXPECT_EQ(p.ids.size(), ids.size() - 2 + 18);
  // The video's slices: t, t + 1, t + 2 on the temporal row; text resumes after max + 1.
  const size_t S = p.ids.size(), v0 = static_cast<size_t>(p.items[1].begin);
  EXPECT_EQ(p.positions[v0 + 4] - p.positions[v0], 1);
  EXPECT_EQ(p.positions[v0 + 8] - p.positions[v0], 2);
  EXPECT_EQ(p.positions[S - 2], p.positions[v0] + 3);  // vision_end: max(2, 1, 1) + 1
  // Qwen2.5-VL's interval: t * 1.25 s per slice * 2 positions per second, truncated.
  const MediaGrid scaled[] = {image, {Modality::kVideo, {3, 4, 4}, 1.25f, 2}};
  const MultimodalPrompt q = expand_media_prompt(ids, scaled, cfg);
  EXPECT_EQ(q.positions[v0 + 4] - q.positions[v0], 2);
  EXPECT_EQ(q.positions[v0 + 8] - q.positions[v0], 5);
  EXPECT_EQ(q.positions[S - 2], q.positions[v0] + 6);

  const MediaGrid swapped[] = {video, image};
  std::string m = invalid_argument([&] { expand_media_prompt(ids, swapped, cfg); });
  EXPECT_CONTAINS(m, "an image pad but item 0 is video");
  const MediaGrid two_images[] = {image, image};
  m = invalid_argument([&] { expand_media_prompt(ids, two_images, cfg); });
  EXPECT_CONTAINS(m, "a video pad but item 1 is image");
  m = invalid_argument([&] { expand_media_prompt(ids, {ok, 1}, cfg); });
  EXPECT_CONTAINS(m, "more media placeholders than media items (1 given)");
  const MediaGrid three[] = {image, video, video};
  m = invalid_argument([&] { expand_media_prompt(ids, three, cfg); });
  EXPECT_CONTAINS(m, "2 media placeholders but 3 media items");
  // rope_index over an expanded prompt that ends inside a video run.
  std::vector<int32_t> cut(p.ids.begin(), p.ids.begin() + static_cast<std::ptrdiff_t>(v0 + 5));
  std::vector<int32_t> pos;
  int32_t delta = 0;
  EXPECT_CONTAINS(invalid_argument([&] { rope_index(cut, ok, cfg, pos, delta); }), "needs 12");
}

// A streamed clip's segments (ContentPart::continues): the template keeps them inside one
// <|vision_start|> ... <|vision_end|>, and expansion places them exactly as one video whose
// slices are theirs in order (ids, positions, rope delta), for Qwen2-VL's and Qwen2.5-VL's
// temporal index alike, also when the segments' tokens are pruned.
TEST(Qwen2VLVideoPrompt, ContinuingSegmentsArePlacedAsOneVideo) {
  Config cfg;
  const int32_t vs = static_cast<int32_t>(cfg.vision_start_token_id),
                ve = static_cast<int32_t>(cfg.vision_end_token_id),
                vid = static_cast<int32_t>(cfg.video_token_id);
  ChatMessage user;
  user.role = "user";
  user.content = {{ContentPart::Kind::kVideo, ""},
                  {ContentPart::Kind::kVideo, ""},
                  {ContentPart::Kind::kVideo, ""},
                  {ContentPart::Kind::kText, "what happens?"}};
  user.content[1].continues = user.content[2].continues = true;
  const std::string text = render_chat({user}, {});
  EXPECT_CONTAINS(text,
                  "<|vision_start|><|video_pad|><|video_pad|><|video_pad|><|vision_end|>"
                  "what happens?");
  user.content[0].kind = ContentPart::Kind::kImage;
  EXPECT_CONTAINS(invalid_argument([&] { render_chat({user}, {}); }), "right after a video");

  struct Interval {
    float second_per_grid;
    int64_t tokens_per_second;
  };
  for (const Interval iv : {Interval{1.0f, 1}, Interval{1.25f, 2}}) {
    SCOPED_TRACE(iv.second_per_grid);
    const std::vector<int32_t> one_ids{1, vs, vid, ve, 3};
    const std::vector<int32_t> seg_ids{1, vs, vid, vid, vid, ve, 3};
    // 7 slices of 6x4 merged tokens: larger in time than in space, so the text after follows
    // the temporal extent; as segments of 2 + 4 + 1 slices.
    const MediaGrid whole[] = {
        {Modality::kVideo, {7, 12, 8}, iv.second_per_grid, iv.tokens_per_second}};
    const MediaGrid segs[] = {
        {Modality::kVideo, {2, 12, 8}, iv.second_per_grid, iv.tokens_per_second},
        {Modality::kVideo, {4, 12, 8}, iv.second_per_grid, iv.tokens_per_second},
        {Modality::kVideo, {1, 12, 8}, iv.second_per_grid, iv.tokens_per_second}};
    const MultimodalPrompt a = expand_media_prompt(one_ids, whole, cfg);
    const MultimodalPrompt b = expand_media_prompt(seg_ids, segs, cfg);
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_EQ(a.positions, b.positions);
    EXPECT_EQ(a.rope_delta, b.rope_delta);
    ASSERT_EQ(b.items.size(), 3u);
    EXPECT_EQ(b.items[1].begin, b.items[0].begin + 48);
    // Pruned: the whole clip keeps tokens {0, 50, 100, 150} of its 168; as segments those fall
    // in segment 0 (0), 1 (50 - 48 = 2; 100 - 48 = 52) and 2 (150 - 144 = 6).
    const int32_t keep_whole[] = {0, 50, 100, 150};
    const int32_t keep0[] = {0}, keep1[] = {2, 52}, keep2[] = {6};
    const MediaGrid pw[] = {
        {Modality::kVideo, {7, 12, 8}, iv.second_per_grid, iv.tokens_per_second, keep_whole}};
    const MediaGrid ps[] = {
        {Modality::kVideo, {2, 12, 8}, iv.second_per_grid, iv.tokens_per_second, keep0},
        {Modality::kVideo, {4, 12, 8}, iv.second_per_grid, iv.tokens_per_second, keep1},
        {Modality::kVideo, {1, 12, 8}, iv.second_per_grid, iv.tokens_per_second, keep2}};
    const MultimodalPrompt c = expand_media_prompt(one_ids, pw, cfg);
    const MultimodalPrompt d = expand_media_prompt(seg_ids, ps, cfg);
    EXPECT_EQ(c.ids, d.ids);
    EXPECT_EQ(c.positions, d.positions);
    EXPECT_EQ(c.rope_delta, d.rope_delta);
  }
  // Segments that are not adjacent are two videos: the second starts after the first's extent.
  const std::vector<int32_t> two_ids{1, vs, vid, ve, vs, vid, ve, 3};
  const MediaGrid two[] = {{Modality::kVideo, {2, 12, 8}}, {Modality::kVideo, {2, 12, 8}}};
  const MultimodalPrompt t = expand_media_prompt(two_ids, two, cfg);
  const size_t v1 = static_cast<size_t>(t.items[1].begin);
  EXPECT_EQ(t.positions[v1], t.positions[v1 - 2] + 2);  // after vision_end, vision_start
  // A segment of another frame size is refused, naming both.
  const std::vector<int32_t> seg2{1, vs, vid, vid, ve, 3};
  const MediaGrid bad[] = {{Modality::kVideo, {2, 12, 8}}, {Modality::kVideo, {2, 12, 10}}};
  EXPECT_CONTAINS(invalid_argument([&] { expand_media_prompt(seg2, bad, cfg); }),
                  "video item 1 continues item 0 but its frames are 168x140 px, not 168x112");
}
