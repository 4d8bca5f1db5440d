// Qwen2-VL video input against the independent reference written from qwen-vl-utils 0.0.8 and
// transformers (tests/reference/qwen2_vl_video_ref.py, run once per process, and
// tests/reference/qwen2_vl_ref.py for the model):
//   sampling: smart_nframes (both rounding rules, fixed nframes, frame factor 1), the frame
//             indices of torch.linspace(...).round() and plan_video's sizes: exact equality;
//   files:    preprocess_video's pixel_values_videos and grid bit-identical to PyAV decode +
//             torchvision resize + the HF processor (moving, static and odd clips; 24, 25,
//             29.97, 30 and 60 fps; H.264, lossless H.264, VP9), reuse on and off, with a pool;
//   lists:    preprocess_video_frames bit-identical to fetch_image (PIL) + the processor;
//   rope:     M-RoPE positions of prompts with videos and images, Qwen2-VL and Qwen2.5-VL's
//             interval (the double definition; HF's float32 product is reported alongside);
//   model:    a video (+ an image) through the tiny checkpoint: video embeddings, last-token
//             logits 1e-4 relative (f32) / 4e-2 (bf16, as test_qwen2_text.cpp), greedy tokens
//             identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "../media/media_test_util.h"
#include "batch_runner.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/npy.h"
#include "io/tokenizer.h"
#include "models/qwen2_vl/processor.h"
#include "models/qwen2_vl/tiny_checkpoint.h"
#include "models/qwen2_vl/token_pruning.h"
#include "models/qwen2_vl/video_processor.h"
#include "ref_test_util.h"
#include "test_model.h"

namespace fs = std::filesystem;
using namespace mmrt;
using namespace mmrt::models;
using namespace mmrt::models::qwen2_vl;
using json = nlohmann::json;
using media_test::image_from_npy;
using media_test::read_bytes;

namespace {

using Ref = media_test::RefRun;

const Ref& ref() {
  static const Ref r("qwen2_vl_video_ref.py", "vlvideo_ref");
  return r;
}

#define REF_OR_FAIL(var)  \
  const Ref& var = ref(); \
  ASSERT_TRUE(var.error.empty()) << var.error

Tensor npy(const Ref& r, const json& name) {
  return io::read_npy((r.dir / name.get<std::string>()).string());
}

// Bitwise float comparison: the count of differing values, the first, the largest difference.
::testing::AssertionResult same_floats(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << got.describe() << " vs " << want.describe();
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  int64_t bad = 0, first = -1;
  double mx = 0;
  for (int64_t i = 0; i < got.numel(); ++i)
    if (std::memcmp(&g[i], &w[i], 4) != 0) {
      if (bad++ == 0) first = i;
      mx = std::max(mx, std::fabs(double(g[i]) - double(w[i])));
    }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.numel() << " values differ (max " << mx << "); first at row "
         << first / got.dim(1) << " col " << first % got.dim(1) << ": " << g[first] << " vs "
         << w[first];
}

ImageProcessorConfig pp_of(const json& pp) {
  ImageProcessorConfig c;
  if (pp.contains("min_pixels")) c.min_pixels = pp["min_pixels"].get<int64_t>();
  if (pp.contains("max_pixels")) c.max_pixels = pp["max_pixels"].get<int64_t>();
  return c;
}

VideoSamplingConfig vc_of(const std::string& rule, int64_t ff, int64_t fixed = 0) {
  VideoSamplingConfig vc;
  vc.rounding = rule == "round" ? VideoSamplingConfig::Rounding::kRound
                                : VideoSamplingConfig::Rounding::kFloor;
  vc.frame_factor = ff;
  vc.nframes = fixed;
  return vc;
}

GridThw grid_of(const json& g) {
  return {g[0].get<int64_t>(), g[1].get<int64_t>(), g[2].get<int64_t>()};
}

}  // namespace

TEST(Qwen2VLVideoRef, SmartNframesMatchesReference) {
  REF_OR_FAIL(r);
  int64_t n = 0, errors = 0;
  for (const json& row : r.manifest["sampling"]["nframes"]) {
    const int64_t total = row[0].get<int64_t>(), fixed = row[3].get<int64_t>(),
                  ff = row[4].get<int64_t>(), want = row[5].get<int64_t>();
    const double fps = row[1].get<double>();
    const VideoSamplingConfig vc = vc_of(row[2].get<std::string>(), ff, fixed);
    SCOPED_TRACE(row.dump());
    if (want < 0) {
      EXPECT_THROW(smart_nframes(total, fps, vc), InvalidArgument);
      ++errors;
    } else {
      EXPECT_EQ(smart_nframes(total, fps, vc), want);
    }
    ++n;
  }
  std::printf("[   INFO   ] %lld smart_nframes cases, %lld of them errors\n", (long long)n,
              (long long)errors);
  EXPECT_GT(n, 5000);
  EXPECT_GT(errors, 100);
}

TEST(Qwen2VLVideoRef, FrameIndicesMatchTorchLinspace) {
  REF_OR_FAIL(r);
  const Tensor flat = npy(r, r.manifest["sampling"]["linspace_file"]);
  const int64_t* all = flat.data<int64_t>();
  int64_t cases = 0, bad = 0, values = 0;
  for (const json& row : r.manifest["sampling"]["linspace"]) {
    const int64_t total = row[0].get<int64_t>(), n = row[1].get<int64_t>(),
                  off = row[2].get<int64_t>();
    const std::vector<int64_t> got = sample_frame_indices(total, n);
    ASSERT_EQ(static_cast<int64_t>(got.size()), n);
    ASSERT_LE(off + n, flat.numel());
    for (int64_t i = 0; i < n; ++i)
      if (got[static_cast<size_t>(i)] != all[off + i]) {
        if (bad++ < 5)
          ADD_FAILURE() << "linspace(0, " << total - 1 << ", " << n << ")[" << i
                        << "]: " << got[static_cast<size_t>(i)] << " vs torch " << all[off + i];
      }
    ++cases;
    values += n;
  }
  std::printf("[   INFO   ] %lld (total, n) pairs, %lld indices (torch kernel %s)\n",
              (long long)cases, (long long)values,
              r.manifest["capability"].get<std::string>().c_str());
  EXPECT_EQ(bad, 0);
}

TEST(Qwen2VLVideoRef, PlanVideoMatchesReference) {
  REF_OR_FAIL(r);
  int64_t n = 0;
  for (const json& row : r.manifest["plans"]) {
    SCOPED_TRACE(row["width"].dump() + "x" + row["height"].dump() + " " + row["fps"].dump() +
                 " fps " + row["frames"].dump() + " frames, " + row["rule"].get<std::string>() +
                 ", ff " + row["frame_factor"].dump() + ", pp " + row["pp"].dump());
    media::VideoInfo info;
    info.width = row["width"].get<int>();
    info.height = row["height"].get<int>();
    info.fps = row["fps"].get<double>();
    info.frames = row["frames"].get<int64_t>();
    info.seconds = static_cast<double>(info.frames) / info.fps;
    const ImageProcessorConfig pp = pp_of(row["pp"]);
    const VideoSamplingConfig vc =
        vc_of(row["rule"].get<std::string>(), row["frame_factor"].get<int64_t>());
    if (row.contains("error")) {
      EXPECT_THROW(plan_video(info, pp, vc), InvalidArgument);
      continue;
    }
    const VideoPlan p = plan_video(info, pp, vc);
    EXPECT_EQ(p.indices, row["indices"].get<std::vector<int64_t>>());
    EXPECT_EQ(p.sample_fps, row["sample_fps"].get<double>());
    EXPECT_EQ(p.resized_height, row["resized"][0].get<int64_t>());
    EXPECT_EQ(p.resized_width, row["resized"][1].get<int64_t>());
    EXPECT_EQ(p.grid, grid_of(row["grid"]));
    // The qwen-vl-utils size before the processor's own smart_resize.
    const ResizedSize vs = video_smart_resize(info.height, info.width, 28, vc.min_pixels,
                                              row["max_pixels"].get<double>());
    EXPECT_EQ(vs.height, row["video_size"][0].get<int64_t>());
    EXPECT_EQ(vs.width, row["video_size"][1].get<int64_t>());
    ++n;
  }
  EXPECT_GT(n, 1000);
}

namespace {

// One clip of the reference set through preprocess_video: grid, sample fps, bit-identical
// pixel_values_videos, the reuse bookkeeping; again with reuse off and a pool.
void check_clip(const Ref& r, const json& c, ThreadPool& pool) {
  SCOPED_TRACE(c["name"].get<std::string>() + " (" + c["file"].get<std::string>() + ")");
  const std::vector<uint8_t> bytes = read_bytes(r.dir / c["file"].get<std::string>());
  const ImageProcessorConfig pp = pp_of(c["pp"]);
  const VideoSamplingConfig vc =
      vc_of(c["rule"].get<std::string>(), c["frame_factor"].get<int64_t>());
  const media::VideoInfo info = media::probe_video(bytes);
  EXPECT_EQ(info.frames, c["frames"].get<int64_t>());
  EXPECT_EQ(info.fps, c["fps"].get<double>());
  const Tensor want = npy(r, c["pixel_values"]);
  const VideoInputs got = preprocess_video(bytes, pp, vc);
  EXPECT_EQ(got.grid, grid_of(c["grid"]));
  EXPECT_EQ(got.n_tokens(), got.grid[0] * got.grid[1] * got.grid[2] / 4);
  EXPECT_EQ(got.sample_fps, c["sample_fps"].get<double>());
  EXPECT_TRUE(same_floats(got.pixel_values_videos, want));
  EXPECT_EQ(got.first_equal_slice, c["first_equal_slice"].get<std::vector<int64_t>>());
  EXPECT_EQ(got.frames_reused, c["frames_reused"].get<int64_t>());
  // The approximate tier's kept tokens, from pixel_values, vs the rule on the uint8 frames.
  for (const json& pr : c["prune"]) {
    const double t = pr["threshold"].get<double>();
    SCOPED_TRACE("prune threshold " + std::to_string(t));
    const Tensor want_kept = npy(r, pr["kept"]);
    const std::vector<int32_t> kept = prune_video_tokens(got.pixel_values_videos, got.grid, pp, t);
    ASSERT_EQ(static_cast<int64_t>(kept.size()), want_kept.numel());
    for (size_t i = 0; i < kept.size(); ++i)
      ASSERT_EQ(kept[i], want_kept.data<int64_t>()[i]) << "kept token " << i;
  }
  VideoPreprocessOptions off;
  off.reuse_equal_frames = false;
  off.ctx.pool = &pool;
  const VideoInputs plain = preprocess_video(bytes, pp, vc, off);
  EXPECT_EQ(plain.frames_reused, 0);
  EXPECT_TRUE(same_floats(plain.pixel_values_videos, want));
}

// The checkpoint's own budgets change the qwen-vl-utils size: HF then resizes each frame a
// second time (PIL bicubic, from the torchvision-resized frame).
bool processor_resizes(const json& c) {
  return c["resized"] != c["video_size"];
}

}  // namespace

TEST(Qwen2VLVideoRef, PixelValuesIdenticalToReference) {
  REF_OR_FAIL(r);
  ThreadPool pool(3);
  int n = 0;
  for (const json& c : r.manifest["clips"])
    if (!processor_resizes(c)) {
      check_clip(r, c, pool);
      ++n;
    }
  EXPECT_EQ(n, 9);
}

// preprocessor_config.json budgets tighter than the video's size (max_pixels 200704 for a
// 364x644 frame): torchvision to 364x644, then PIL to 336x588, as HF does.
TEST(Qwen2VLVideoRef, PixelValuesWithATighterProcessorBudget) {
  REF_OR_FAIL(r);
  ThreadPool pool(3);
  int n = 0;
  for (const json& c : r.manifest["clips"])
    if (processor_resizes(c)) {
      check_clip(r, c, pool);
      ++n;
    }
  EXPECT_EQ(n, 1);
}

TEST(Qwen2VLVideoRef, FrameListsIdenticalToReference) {
  REF_OR_FAIL(r);
  int n = 0;
  for (const json& c : r.manifest["frame_lists"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<media::Image> frames;
    for (const json& f : c["frames"]) frames.push_back(image_from_npy(npy(r, f)));
    const VideoInputs got = preprocess_video_frames(frames, pp_of(c["pp"]), VideoSamplingConfig{});
    EXPECT_EQ(got.grid, grid_of(c["grid"]));
    EXPECT_TRUE(same_floats(got.pixel_values_videos, npy(r, c["pixel_values"])));
    ++n;
  }
  EXPECT_EQ(n, 7);
}

TEST(Qwen2VLVideoRef, RopePositionsMatchReference) {
  REF_OR_FAIL(r);
  Config cfg;
  const json& rc = r.manifest["rope_config"];
  cfg.image_token_id = rc["image_token_id"].get<int64_t>();
  cfg.video_token_id = rc["video_token_id"].get<int64_t>();
  cfg.vision_start_token_id = rc["vision_start_token_id"].get<int64_t>();
  cfg.vision_end_token_id = rc["vision_end_token_id"].get<int64_t>();
  int64_t f32_rows = 0, f32_cases = 0;
  for (const json& c : r.manifest["rope"]) {
    SCOPED_TRACE(c["items"].dump());
    const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
    const Tensor expanded = npy(r, c["expanded"]);
    auto check = [&](const std::string& tag, int64_t tps) {
      SCOPED_TRACE(tag);
      std::vector<MediaGrid> items;
      for (const json& it : c["items"]) {
        const bool video = it["kind"] == "video";
        MediaGrid item{video ? Modality::kVideo : Modality::kImage, grid_of(it["grid"])};
        if (video && tps > 0) {
          item.second_per_grid = static_cast<float>(it["second_per_grid"].get<double>());
          item.tokens_per_second = tps;
        }
        items.push_back(item);
      }
      const MultimodalPrompt p = expand_media_prompt(ids, items, cfg);
      const int64_t S = expanded.numel();
      ASSERT_EQ(static_cast<int64_t>(p.ids.size()), S);
      for (int64_t i = 0; i < S; ++i) ASSERT_EQ(p.ids[size_t(i)], expanded.data<int64_t>()[i]);
      const Tensor want = npy(r, c[tag]);
      ASSERT_EQ(want.numel(), 3 * S + 1);
      const int64_t* w = want.data<int64_t>();
      for (int64_t i = 0; i < 3 * S; ++i)
        ASSERT_EQ(p.positions[size_t(i)], w[i]) << "row " << i / S << " token " << i % S;
      EXPECT_EQ(p.rope_delta, w[3 * S]);
      if (tps > 0) {  // the same product in double, for the record
        const Tensor f64 = npy(r, c["qwen25_tps" + std::to_string(tps) + "_f64"]);
        int64_t d = 0;
        for (int64_t i = 0; i < 3 * S + 1; ++i) d += f64.data<int64_t>()[i] != w[i];
        f32_rows += d;
        f32_cases += d > 0;
      }
    };
    check("qwen2", 0);
    check("qwen25_tps2_f32", 2);
    check("qwen25_tps4_f32", 4);
  }
  std::printf(
      "[   INFO   ] Qwen2.5-VL time index, as HF computes it (float32): the same product in "
      "double would differ in %lld positions of %lld of the %zu x 2 prompts\n",
      (long long)f32_rows, (long long)f32_cases, r.manifest["rope"].size());
}

// ---- the model -------------------------------------------------------------------------------

namespace {

using test::Diff;
using test::diff;
using test::shell_out;

Tensor read_f32(const fs::path& p, int64_t cols) {
  const std::vector<uint8_t> raw = read_bytes(p);
  Tensor t = Tensor::empty(DType::kF32, {static_cast<int64_t>(raw.size() / 4) / cols, cols});
  std::memcpy(t.raw(), raw.data(), t.nbytes());
  return t;
}

}  // namespace

// (dtype, video_prune_threshold): 0 is the exact path; 2 the approximate tier, whose kept
// tokens keep the positions of the full prompt (the reference removes the other rows of its
// full prompt).
class Qwen2VLVideoModel : public ::testing::TestWithParam<std::tuple<DType, double>> {};

TEST_P(Qwen2VLVideoModel, VideoAndImagePromptMatchesReference) {
  REF_OR_FAIL(r);
  const auto [dt, threshold] = GetParam();
  const double tol = dt == DType::kF32 ? 1e-4 : 4e-2;
  const fs::path dir = r.dir / ("model_" + std::string(dtype_name(dt)));
  TinyOptions o;
  o.dtype = dt;
  o.seed = 9;
  const Config cfg = make_tiny_checkpoint(dir.string(), o).config;
  test::TestModelOptions mo;
  mo.kv_dtype = dt;
  mo.kv_blocks = 64;
  auto lm = test::load_test_model(dir.string(), mo);
  const Processor& proc = lm->processor();

  // The static clip (its last three slices are equal: the runner encodes two) and an image.
  const json* clip = nullptr;
  for (const json& c : r.manifest["clips"])
    if (c["name"] == "static_box") clip = &c;
  ASSERT_NE(clip, nullptr);
  const std::vector<uint8_t> bytes = read_bytes(r.dir / (*clip)["file"].get<std::string>());
  MediaOptions mo_video;
  mo_video.video_prune_threshold = threshold;
  PreparedMedia video = proc.preprocess(Modality::kVideo, bytes, {}, mo_video);
  const PreparedMedia video_full = proc.preprocess(Modality::kVideo, bytes, {});
  ASSERT_TRUE(same_floats(video.features, npy(r, (*clip)["pixel_values"])));
  const int64_t n_full = video_full.n_tokens;
  std::vector<int32_t> kept = video.kept_tokens;  // the video's rows among the full item's
  if (threshold > 0) {
    // Its box stops after 15 frames: the last two slices keep nothing, the second a few tokens.
    ASSERT_FALSE(kept.empty());
    const int64_t per = n_full / video.dims[0];
    EXPECT_LT(kept.back(), 2 * per);
    EXPECT_GT(kept.back(), per);
    EXPECT_EQ(video.encoder_cost, 2 * video.dims[1] * video.dims[2]);
  } else {
    for (int32_t q = 0; q < n_full; ++q) kept.push_back(q);
  }
  EXPECT_EQ(video.n_tokens, static_cast<int64_t>(kept.size()));
  PreparedMedia image;
  image.modality = Modality::kImage;
  image.dims = {1, 4, 6};
  image.n_tokens = 6;
  image.encoder_cost = 24;
  image.features = Tensor::empty(DType::kF32, {24, 1176});
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < image.features.numel(); ++i) image.features.data<float>()[i] = nd(rng);
  const fs::path img_npy = dir / "img.npy", img_grid = dir / "img_grid.npy",
                 vid_grid = dir / "vid_grid.npy", ids_file = dir / "ids.txt";
  io::write_npy(img_npy.string(), image.features);
  auto write_grid = [](const fs::path& p, const std::vector<int64_t>& g) {
    Tensor t = Tensor::empty(DType::kI64, {1, 3});
    std::memcpy(t.raw(), g.data(), 24);
    io::write_npy(p.string(), t);
  };
  write_grid(img_grid, image.dims);
  write_grid(vid_grid, video.dims);

  const io::Tokenizer tok = io::Tokenizer::from_file((dir / "tokenizer.json").string());
  ChatMessage user;
  user.role = "user";
  user.content = {{ContentPart::Kind::kImage, ""},
                  {ContentPart::Kind::kText, "Compare the picture with"},
                  {ContentPart::Kind::kVideo, ""},
                  {ContentPart::Kind::kText, "What moves?"}};
  const std::vector<int32_t> ids = tok.encode(proc.render_chat({user}, true));
  const PreparedMedia items[] = {image, video}, full_items[] = {image, video_full};
  const ExpandedPrompt p = proc.expand(ids, items);
  const ExpandedPrompt pf = proc.expand(ids, full_items);  // the reference's prompt
  ASSERT_EQ(p.spans.size(), 2u);
  ASSERT_EQ(p.spans[1].n_tokens, video.n_tokens);
  const int64_t S = static_cast<int64_t>(p.ids.size()), Sf = static_cast<int64_t>(pf.ids.size());
  {
    std::string s;
    for (int32_t t : pf.ids) s += (s.empty() ? "" : ",") + std::to_string(t);
    std::ofstream(ids_file) << s;
  }
  // The pruned prompt is the full one without the dropped video rows, positions included.
  std::vector<int64_t> rows_of;  // p's row -> pf's row
  for (int64_t i = 0; i < pf.spans[1].begin; ++i) rows_of.push_back(i);
  for (int32_t q : kept) rows_of.push_back(pf.spans[1].begin + q);
  for (int64_t i = pf.spans[1].begin + n_full; i < Sf; ++i) rows_of.push_back(i);
  ASSERT_EQ(static_cast<int64_t>(rows_of.size()), S);
  for (int64_t i = 0; i < S; ++i) {
    ASSERT_EQ(p.ids[size_t(i)], pf.ids[size_t(rows_of[size_t(i)])]) << i;
    for (int c = 0; c < 3; ++c)
      ASSERT_EQ(p.positions[size_t(c * S + i)], pf.positions[size_t(c * Sf + rows_of[size_t(i)])])
          << "row " << i << " axis " << c;
  }
  EXPECT_EQ(p.rope_delta, pf.rope_delta + (Sf - S));
  const fs::path keep_npy = dir / "keep.npy";
  {
    Tensor k = Tensor::empty(DType::kI64, {static_cast<int64_t>(kept.size())});
    for (size_t i = 0; i < kept.size(); ++i) k.data<int64_t>()[i] = kept[i];
    io::write_npy(keep_npy.string(), k);
  }
  const std::string ref_cmd =
      std::string(MMRT_REF_PYTHON) + " " + MMRT_SOURCE_DIR + "/tests/reference/qwen2_vl_ref.py ";
  const std::string media =
      " --model " + dir.string() + " --ids @" + ids_file.string() + " --pixels " +
      img_npy.string() + " --grid " + img_grid.string() + " --video-pixels " + r.dir.string() +
      "/" + (*clip)["pixel_values"].get<std::string>() + " --video-grid " + vid_grid.string() +
      (threshold > 0 ? " --video-keep " + keep_npy.string() : "");

  // Positions of the full prompt (the same for both dtypes: checked once).
  if (dt == DType::kF32 && threshold == 0) {
    shell_out(ref_cmd + "positions" + media + " --out " + (dir / "pos.bin").string());
    const std::vector<uint8_t> pos = read_bytes(dir / "pos.bin");
    ASSERT_EQ(pos.size(), static_cast<size_t>(3 * Sf + 1) * 8);
    for (int64_t i = 0; i < 3 * Sf; ++i)
      ASSERT_EQ(pf.positions[size_t(i)], reinterpret_cast<const int64_t*>(pos.data())[i]) << i;
    EXPECT_EQ(pf.rope_delta, reinterpret_cast<const int64_t*>(pos.data())[3 * Sf]);
  }

  // Video embeddings: slices encoded one by one (equal slices reused) vs the whole grid.
  const Tensor venc = test::host(lm->runner().encode(video));
  const Tensor ienc = test::host(lm->runner().encode(image));
  const int64_t H = cfg.text.hidden_size;
  shell_out(ref_cmd + "vision --model " + dir.string() + " --video-pixels " + r.dir.string() + "/" +
            (*clip)["pixel_values"].get<std::string>() + " --video-grid " + vid_grid.string() +
            " --out " + (dir / "venc.bin").string());
  const Tensor vref_full = read_f32(dir / "venc.bin", H);
  ASSERT_EQ(vref_full.dim(0), n_full);
  Tensor vref = Tensor::empty(DType::kF32, {static_cast<int64_t>(kept.size()), H});
  for (size_t i = 0; i < kept.size(); ++i)
    std::memcpy(vref.data<float>() + static_cast<int64_t>(i) * H,
                vref_full.data<float>() + kept[i] * H, static_cast<size_t>(H) * 4);
  ASSERT_EQ(vref.shape(), venc.shape());
  const Diff dv = diff(venc.data<float>(), vref.data<float>(), venc.numel());
  std::printf("[   INFO   ] %s video embeddings: max rel error %.3g (abs %.3g of %.3g)\n",
              std::string(dtype_name(dt)).c_str(), dv.rel(), dv.max_abs, dv.max_ref);
  EXPECT_LE(dv.rel(), tol);

  // Last-token logits of a prefill in chunks of 61 rows (both spans split across chunks).
  Tensor feats = Tensor::empty(DType::kF32, {image.n_tokens + video.n_tokens, H});
  std::memcpy(feats.data<float>(), ienc.raw(), ienc.nbytes());
  std::memcpy(feats.data<float>() + image.n_tokens * H, venc.raw(), venc.nbytes());
  std::vector<int32_t> rows;
  for (const MediaSpan& s : p.spans)
    for (int64_t k = 0; k < s.n_tokens; ++k) rows.push_back(static_cast<int32_t>(s.begin + k));
  std::vector<int32_t> blocks;
  for (int i = 0; i < 64; ++i) blocks.push_back((i * 37) % 64);
  const Tensor logits = test::chunked_prefill(*lm, p.ids, rows, feats, 61, blocks, p.positions, 3);
  shell_out(ref_cmd + "logits" + media + " --out " + (dir / "logits.bin").string());
  const int64_t V = logits.dim(1);
  const Tensor lref = read_f32(dir / "logits.bin", V);
  ASSERT_EQ(lref.dim(0), S);
  const Diff dl = diff(logits.data<float>(), lref.data<float>() + (S - 1) * V, V);
  std::printf("[   INFO   ] %s last-token logits (%lld tokens, %lld video): max rel error %.3g\n",
              std::string(dtype_name(dt)).c_str(), (long long)S, (long long)video.n_tokens,
              dl.rel());
  EXPECT_LE(dl.rel(), tol);

  // Greedy tokens through the batch runner (decode positions: cache index + rope_delta).
  engine::TextRequest req;
  req.prompt = p.ids;
  req.positions = p.positions;
  req.rope_delta = p.rope_delta;
  req.embed_rows = rows;
  req.embeds = feats;
  req.sampling.max_tokens = 24;
  req.sampling.ignore_eos = true;
  engine::BatchRunnerOptions bo;
  bo.step_token_budget = 53;
  const auto got = engine::run_text_batch(*lm, tok, {req}, bo)[0].tokens;
  const auto want = json::parse(shell_out(ref_cmd + "generate" + media + " --max-new 24"))
                        .get<std::vector<int32_t>>();
  EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(DtypesAndPruning, Qwen2VLVideoModel,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16),
                                            ::testing::Values(0.0, 2.0)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) > 0 ? "_pruned" : "");
                         });
