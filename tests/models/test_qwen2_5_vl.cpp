// Qwen2.5-VL against the PyTorch reference written from the HF definition
// (tests/reference/qwen2_5_vl_ref.py) on the tiny checkpoint (vision depth 4, full attention in
// blocks 1 and 3): the window order, the vision tower on images of several aspect ratios (ragged
// edge windows), the last-token logits of a chunked prefill with the images split across chunks,
// and greedy tokens. f32 within 1e-4 of the largest reference value; greedy tokens identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "batch_runner.h"
#include "core/error.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "models/encoder_block.h"
#include "models/qwen2_5_vl/config.h"
#include "models/qwen2_5_vl/tiny_checkpoint.h"
#include "models/qwen2_5_vl/vision_tower.h"
#include "models/qwen2_vl/processor.h"
#include "models/registry.h"
#include "ref_test_util.h"
#include "test_model.h"

namespace fs = std::filesystem;
using namespace mmrt;
using models::qwen2_vl::GridThw;

namespace {

// The grids as image_grid_thw: int64 [n, 3].
Tensor grid_tensor(const std::vector<GridThw>& grids) {
  Tensor t = Tensor::empty(DType::kI64, {static_cast<int64_t>(grids.size()), 3});
  for (size_t i = 0; i < grids.size(); ++i)
    for (size_t j = 0; j < 3; ++j) t.data<int64_t>()[3 * i + j] = grids[i][j];
  return t;
}

double rel_err(const float* got, const void* want, size_t n) {
  return test::diff(got, static_cast<const float*>(want), static_cast<int64_t>(n)).rel();
}

struct World {
  fs::path dir;
  models::qwen2_5_vl::Config cfg;
  // In patches: merged grids 2x3, 6x5 (a window and a ragged edge), 9x3 (tall) and a 2-slice
  // video-like grid 4x8; windows are 4x4 merged tokens.
  std::vector<GridThw> grids{{1, 4, 6}, {1, 12, 10}, {1, 18, 6}, {2, 8, 16}};
  Tensor pixels;
  fs::path pix_npy, grid_npy;

  explicit World(DType dtype = DType::kF32, const char* naming = "old") {
    dir = fs::temp_directory_path() / ("mmrt_q25_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    models::TinyModelOptions o;
    o.size = "tiny";
    o.dtype = dtype;
    o.naming = naming;
    o.seed = 5;
    models::qwen2_5_vl::make_tiny_model(dir.string(), o);
    cfg = models::qwen2_5_vl::load_config((dir / "config.json").string());
    int64_t n = 0;
    for (auto& g : grids) n += g[0] * g[1] * g[2];
    pixels = Tensor::empty(DType::kF32, {n, 1176});
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.f, 1.f);
    for (int64_t i = 0; i < pixels.numel(); ++i) pixels.data<float>()[i] = d(rng);
    pix_npy = dir / "pixels.npy";
    grid_npy = dir / "grid.npy";
    io::write_npy(pix_npy.string(), pixels);
    io::write_npy(grid_npy.string(), grid_tensor(grids));
  }
  ~World() { fs::remove_all(dir); }

  std::string ref(const std::string& mode, const std::string& extra) const {
    return std::string(MMRT_REF_PYTHON) + " " + MMRT_SOURCE_DIR +
           "/tests/reference/qwen2_5_vl_ref.py " + mode + " --model " + dir.string() +
           " --pixels " + pix_npy.string() + " --grid " + grid_npy.string() + " " + extra;
  }

  // The first n grids as images (their pixels are the first rows), written for the reference
  // in place of the whole set.
  std::pair<std::vector<GridThw>, Tensor> first_images(size_t n) const {
    const std::vector<GridThw> g(grids.begin(), grids.begin() + static_cast<std::ptrdiff_t>(n));
    int64_t rows = 0;
    for (auto& x : g) rows += x[0] * x[1] * x[2];
    Tensor px = Tensor::empty(DType::kF32, {rows, 1176});
    std::memcpy(px.raw(), pixels.raw(), px.nbytes());
    io::write_npy(pix_npy.string(), px);
    io::write_npy(grid_npy.string(), grid_tensor(g));
    return {g, px};
  }

  // Text around one <|vision_start|><|image_pad|><|vision_end|> per image (the video-like
  // grid as an image of 2 slices is not a real image: the first three grids only).
  std::vector<int32_t> prompt(size_t n_images) const {
    std::mt19937 rng(17);
    std::uniform_int_distribution<int32_t> d(0, 900);
    std::vector<int32_t> ids;
    auto text = [&](int n) {
      for (int i = 0; i < n; ++i) ids.push_back(d(rng));
    };
    text(5);
    for (size_t i = 0; i < n_images; ++i) {
      ids.push_back(static_cast<int32_t>(cfg.qwen2.vision_start_token_id));
      ids.push_back(static_cast<int32_t>(cfg.qwen2.image_token_id));
      ids.push_back(static_cast<int32_t>(cfg.qwen2.vision_end_token_id));
      text(4 + static_cast<int>(i));
    }
    return ids;
  }
};

}  // namespace

TEST(Qwen25VL, WindowOrderMatchesReference) {
  World w;
  const auto o = models::qwen2_5_vl::window_order(w.grids, w.cfg.vision);
  fs::path out = w.dir / "windows.bin";
  test::shell_out(w.ref("windows", "--out " + out.string()));
  const auto raw = test::file_bytes(out);
  const int64_t* r = reinterpret_cast<const int64_t*>(raw.data());
  const size_t n = raw.size() / 8;
  ASSERT_GE(n, 2u);
  const size_t n_index = static_cast<size_t>(r[n - 2]), n_cu = static_cast<size_t>(r[n - 1]);
  ASSERT_EQ(n_index + n_cu + 2, n);
  ASSERT_EQ(o.index.size(), n_index);
  for (size_t i = 0; i < n_index; ++i) EXPECT_EQ(o.index[i], r[i]) << "window position " << i;
  ASSERT_EQ(o.cu_window.size(), n_cu);
  for (size_t i = 0; i < n_cu; ++i) EXPECT_EQ(o.cu_window[i], r[n_index + i]) << "boundary " << i;
  // Frames: 4x6, 12x10, 18x6 patches, then two slices of 8x16.
  EXPECT_EQ(o.cu_frame, (std::vector<int32_t>{0, 24, 144, 252, 380, 508}));
}

TEST(Qwen25VL, VisionTowerMatchesReference) {
  World w;
  auto st = io::SafeTensors::open(w.dir.string());
  auto vt = models::qwen2_5_vl::VisionTower::load(test::test_backend(), st, w.cfg,
                                                  kernels::WeightFormat::kF32);
  Tensor got = test::host(vt->forward(w.pixels, w.grids));
  EXPECT_EQ(got.dim(0), w.pixels.dim(0) / 4);
  EXPECT_EQ(got.dim(1), w.cfg.vision.out_hidden_size);
  fs::path out = w.dir / "vision.bin";
  test::shell_out(w.ref("vision", "--out " + out.string()));
  auto ref = test::file_bytes(out);
  ASSERT_EQ(ref.size(), got.nbytes());
  EXPECT_LE(rel_err(got.data<float>(), reinterpret_cast<const float*>(ref.data()),
                    static_cast<size_t>(got.numel())),
            1e-4);
}

// The tower as a job of one part per block (window and full attention blocks alike): in any
// split, the same bits as forward().
TEST(Qwen25VL, TheTowerInPartsEqualsForwardBitForBit) {
  World w;
  auto st = io::SafeTensors::open(w.dir.string());
  auto vt = models::qwen2_5_vl::VisionTower::load(test::test_backend(), st, w.cfg,
                                                  kernels::WeightFormat::kBF16);
  const Tensor whole = test::host(vt->forward(w.pixels, w.grids));
  ASSERT_EQ(vt->parts(), w.cfg.vision.depth + 1);  // a part per block, one for the merger
  for (int64_t first = 1; first < vt->parts(); ++first) {
    auto job = vt->begin(w.pixels, w.grids);
    job->run(first);
    EXPECT_THROW(job->result(), InternalError);
    job->run(job->parts() - first);
    EXPECT_THROW(job->run(1), InternalError);
    const Tensor got = test::host(job->result());
    ASSERT_EQ(got.nbytes(), whole.nbytes());
    EXPECT_EQ(std::memcmp(got.raw(), whole.raw(), got.nbytes()), 0) << "first " << first;
  }
}

// int8 encoder blocks (blocks 0-2 of 4 in int8: x per row, weights per output channel, gate|up
// fused; block 3, the patch embedding and the merger f32) against the reference that quantises
// the same way. Float rounding moves a value across a rounding boundary of the next
// quantisation now and then, and on this tiny tower (width 32, weights ~0.02) the quantisation's
// own effect is small, so single flips show in the largest error: the implementation must be
// within the suite's f32 tolerance at every element, and on average 10x closer to the
// quantised reference than the quantisation moves the output (measured: 6.2e-8 against 1.6e-6,
// 26x; weight-only int8 or another rounding would be about 1x).
TEST(Qwen25VL, Int8BlocksMatchTheQuantisedReference) {
  World w;
  const kernels::Backend& be = test::test_backend();
  std::string why;
  const std::optional<models::EncoderPrecision> int8 = test::int8_encoder(1, why);
  if (!int8) GTEST_SKIP() << why;
  const models::EncoderPrecision& prec = *int8;
  auto st = io::SafeTensors::open(w.dir.string());
  auto vt = models::qwen2_5_vl::VisionTower::load(be, st, w.cfg, prec);
  Tensor got = test::host(vt->forward(w.pixels, w.grids));
  auto ref_of = [&](int blocks) {
    fs::path out = w.dir / ("vision_q" + std::to_string(blocks) + ".bin");
    test::shell_out(w.ref(
        "vision", test::int8_ref_args("--int8-blocks", blocks, prec) + " --out " + out.string()));
    auto r = test::file_bytes(out);
    EXPECT_EQ(r.size(), got.nbytes());
    return r;
  };
  const auto quantised = ref_of(3), exact = ref_of(0);
  const float* q = reinterpret_cast<const float*>(quantised.data());
  const float* e = reinterpret_cast<const float*>(exact.data());
  const test::Diff di = test::diff(got.data<float>(), q, got.numel()),
                   de = test::diff(e, q, got.numel());
  const double impl_max = di.rel(), effect_max = de.rel();
  std::printf(
      "int8 blocks: largest error %.2e against the quantised reference (the quantisation's own "
      "effect %.2e); mean |error| %.2e against %.2e\n",
      impl_max, effect_max, di.mean_abs(), de.mean_abs());
  EXPECT_LE(impl_max, 1e-4);
  EXPECT_LE(di.mean_abs(), de.mean_abs() / 10)
      << "mmrt's int8 blocks are not the quantised reference's";
  EXPECT_GT(effect_max, 3e-5) << "the reference did not quantise";
}

TEST(Qwen25VL, ImageTextLogitsAndGreedyMatchReference) {
  World w;
  const auto [grids, pixels] = w.first_images(3);

  auto st = io::SafeTensors::open(w.dir.string());
  auto vt = models::qwen2_5_vl::VisionTower::load(test::test_backend(), st, w.cfg,
                                                  kernels::WeightFormat::kF32);
  test::TestModelOptions lo;
  lo.kv_dtype = DType::kF32;
  lo.kv_blocks = 64;
  auto lm = test::load_test_model(w.dir.string(), lo);
  auto p = models::qwen2_vl::expand_image_prompt(w.prompt(3), grids, w.cfg.qwen2);
  Tensor feats = vt->forward(pixels, grids);

  engine::TextRequest r;
  r.prompt = p.ids;
  r.positions = p.positions;
  r.rope_delta = p.rope_delta;
  for (const auto& im : p.items)
    for (int64_t k = 0; k < im.n_tokens; ++k)
      r.embed_rows.push_back(static_cast<int32_t>(im.begin + k));
  r.embeds = feats;
  r.sampling.max_tokens = 16;
  r.sampling.ignore_eos = true;
  {  // Last-token logits, prefilled in chunks of 7 (the images split across chunks).
    std::vector<int32_t> blocks{3, 1, 2, 0, 5, 4, 7, 6};
    const int64_t S = static_cast<int64_t>(p.ids.size());
    const Tensor logits =
        test::chunked_prefill(*lm, p.ids, r.embed_rows, feats, 7, blocks, p.positions, 3);
    fs::path out = w.dir / "logits.bin";
    test::shell_out(w.ref("logits", "--ids " + test::csv(p.ids) + " --out " + out.string()));
    auto ref = test::file_bytes(out);
    const int64_t V = logits.dim(1);
    ASSERT_EQ(ref.size(), static_cast<size_t>(S * V * 4));
    EXPECT_LE(
        rel_err(logits.data<float>(), reinterpret_cast<const float*>(ref.data()) + (S - 1) * V,
                static_cast<size_t>(V)),
        1e-4);
  }
  auto tok = io::Tokenizer::from_file((w.dir / "tokenizer.json").string());
  engine::BatchRunnerOptions bo;
  bo.step_token_budget = 9;
  auto got = engine::run_text_batch(*lm, tok, {r}, bo)[0].tokens;
  auto want = nlohmann::json::parse(
                  test::shell_out(w.ref("generate", "--ids " + test::csv(p.ids) + " --max-new 16")))
                  .get<std::vector<int32_t>>();
  EXPECT_EQ(got, want);
}

// A video's temporal positions follow time: the same clip sampled at 2 and at 1 fps gets a
// slice every 1 s and every 2 s (second_per_grid = 2 / fps), so its t positions step by 2 and by
// 4 (tokens_per_second 2), as HF's get_rope_index gives them (the reference, at each clip's
// second_per_grid); Qwen2-VL's would be the slice index at both.
TEST(Qwen25VL, VideoPositionsFollowTimeAtTwoFps) {
  if (std::system("ffmpeg -version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "the ffmpeg CLI (libx264) is needed to make the clip";
  World w;
  const fs::path clip = w.dir / "clip.mp4";
  ASSERT_EQ(std::system(("ffmpeg -hide_banner -loglevel error -nostdin -y -f lavfi -i "
                         "testsrc2=s=64x48:r=10:d=4 -c:v libx264 -preset veryfast -qp 0 "
                         "-pix_fmt yuv420p -threads 1 " +
                         clip.string())
                            .c_str()),
            0);
  const std::vector<uint8_t> bytes = test::file_bytes(clip);
  const auto proc = models::load_processor(w.dir.string());
  const auto& c = w.cfg.qwen2;
  const std::vector<int32_t> ids{5, static_cast<int32_t>(c.vision_start_token_id),
                                 static_cast<int32_t>(c.video_token_id),
                                 static_cast<int32_t>(c.vision_end_token_id), 7};
  std::vector<int64_t> steps;
  for (double fps : {2.0, 1.0}) {
    SCOPED_TRACE(fps);
    models::MediaOptions o;
    o.video_fps = fps;
    const models::PreparedMedia item = proc->preprocess(models::Modality::kVideo, bytes, {}, o);
    ASSERT_GT(item.slice_seconds, 0);
    const models::ExpandedPrompt e = proc->expand(ids, {&item, 1});
    const int64_t S = static_cast<int64_t>(e.ids.size());
    const int64_t per = item.dims[1] * item.dims[2] / 4;  // tokens per slice
    steps.push_back(e.positions[static_cast<size_t>(2 + per)] - e.positions[2]);
    // The reference's get_rope_index at this clip's second_per_grid.
    io::write_npy(w.grid_npy.string(), grid_tensor({{item.dims[0], item.dims[1], item.dims[2]}}));
    fs::path out = w.dir / "pos.bin";
    char spg[64];
    std::snprintf(spg, sizeof spg, "%.17g", item.slice_seconds);
    test::shell_out(std::string(MMRT_REF_PYTHON) + " " + MMRT_SOURCE_DIR +
                    "/tests/reference/qwen2_vl_ref.py positions --model " + w.dir.string() +
                    " --ids " + test::csv(e.ids) + " --video-grid " + w.grid_npy.string() +
                    " --second-per-grid " + spg + " --tokens-per-second 2 --out " + out.string());
    const auto raw = test::file_bytes(out);
    ASSERT_EQ(raw.size(), static_cast<size_t>(3 * S + 1) * 8);
    const int64_t* r = reinterpret_cast<const int64_t*>(raw.data());
    for (int64_t i = 0; i < 3 * S; ++i)
      ASSERT_EQ(e.positions[static_cast<size_t>(i)], r[i]) << "row " << i / S << " token " << i % S;
    EXPECT_EQ(e.rope_delta, r[3 * S]);
  }
  EXPECT_EQ(steps[0], 2) << "2 fps: a slice per second, 2 positions per second";
  EXPECT_EQ(steps[1], 4) << "1 fps: a slice per 2 s";
}

// A bf16 checkpoint with the new tensor names (model.visual.*, model.language_model.*): the
// tower and the last-token logits of a chunked image prompt within the bf16 tolerance of the
// other families' tests (4e-2 of the largest value; the reference computes in f32 on the same
// bf16 weights).
TEST(Qwen25VL, Bf16NewNamingWithinTolerance) {
  World w(DType::kBF16, "new");
  const auto [grids, pixels] = w.first_images(2);
  auto st = io::SafeTensors::open(w.dir.string());
  auto vt = models::qwen2_5_vl::VisionTower::load(test::test_backend(), st, w.cfg,
                                                  kernels::WeightFormat::kBF16);
  Tensor feats = vt->forward(pixels, grids);
  Tensor got = test::host(feats);
  fs::path vout = w.dir / "vision.bin";
  test::shell_out(w.ref("vision", "--out " + vout.string()));
  auto vref = test::file_bytes(vout);
  ASSERT_EQ(vref.size(), got.nbytes());
  const double tower = rel_err(got.data<float>(), reinterpret_cast<const float*>(vref.data()),
                               static_cast<size_t>(got.numel()));
  EXPECT_LE(tower, 4e-2);

  test::TestModelOptions lo;
  lo.kv_blocks = 64;
  auto lm = test::load_test_model(w.dir.string(), lo);
  auto p = models::qwen2_vl::expand_image_prompt(w.prompt(2), grids, w.cfg.qwen2);
  std::vector<int32_t> embed_rows;
  for (const auto& im : p.items)
    for (int64_t k = 0; k < im.n_tokens; ++k)
      embed_rows.push_back(static_cast<int32_t>(im.begin + k));
  std::vector<int32_t> blocks{3, 1, 2, 0, 5, 4, 7, 6};
  const int64_t S = static_cast<int64_t>(p.ids.size());
  const Tensor logits =
      test::chunked_prefill(*lm, p.ids, embed_rows, feats, 7, blocks, p.positions, 3);
  fs::path out = w.dir / "logits.bin";
  test::shell_out(w.ref("logits", "--ids " + test::csv(p.ids) + " --out " + out.string()));
  auto ref = test::file_bytes(out);
  const int64_t V = logits.dim(1);
  ASSERT_EQ(ref.size(), static_cast<size_t>(S * V * 4));
  const double last =
      rel_err(logits.data<float>(), reinterpret_cast<const float*>(ref.data()) + (S - 1) * V,
              static_cast<size_t>(V));
  std::printf("bf16: tower %.2e, last-token logits %.2e of the largest value\n", tower, last);
  EXPECT_LE(last, 4e-2);
}

// A video (the 2-slice 8x16 grid) in a prompt: the tower over both slices (windows and frames
// per slice), the time-scaled positions, and the last-token logits of a chunked prefill against
// the reference's full model at two slice durations (1 s and 2 s: other positions, other
// logits, both matched).
TEST(Qwen25VL, VideoPromptLogitsMatchReferenceAtTwoSliceDurations) {
  World w;
  const std::vector<GridThw> grids{w.grids.back()};  // {2, 8, 16}
  const int64_t rows = grids[0][0] * grids[0][1] * grids[0][2];
  Tensor pixels = Tensor::empty(DType::kF32, {rows, 1176});
  std::memcpy(pixels.raw(), w.pixels.data<float>() + (w.pixels.dim(0) - rows) * 1176,
              pixels.nbytes());
  const fs::path vpix = w.dir / "video_pixels.npy", vgrid = w.dir / "video_grid.npy";
  io::write_npy(vpix.string(), pixels);
  io::write_npy(vgrid.string(), grid_tensor(grids));
  auto st = io::SafeTensors::open(w.dir.string());
  auto vt = models::qwen2_5_vl::VisionTower::load(test::test_backend(), st, w.cfg,
                                                  kernels::WeightFormat::kF32);
  Tensor feats = vt->forward(pixels, grids);
  test::TestModelOptions lo;
  lo.kv_dtype = DType::kF32;
  lo.kv_blocks = 64;
  auto lm = test::load_test_model(w.dir.string(), lo);
  const auto& c = w.cfg.qwen2;
  const std::vector<int32_t> ids{11,
                                 12,
                                 static_cast<int32_t>(c.vision_start_token_id),
                                 static_cast<int32_t>(c.video_token_id),
                                 static_cast<int32_t>(c.vision_end_token_id),
                                 13,
                                 14,
                                 15};
  std::vector<std::vector<float>> lasts;
  for (const float seconds : {1.0f, 2.0f}) {
    SCOPED_TRACE(seconds);
    models::qwen2_vl::MediaGrid item{models::Modality::kVideo, grids[0], seconds,
                                     w.cfg.vision.tokens_per_second};
    const auto p = models::qwen2_vl::expand_media_prompt(ids, {&item, 1}, c);
    std::vector<int32_t> embed_rows;
    for (int64_t k = 0; k < p.items[0].n_tokens; ++k)
      embed_rows.push_back(static_cast<int32_t>(p.items[0].begin + k));
    std::vector<int32_t> blocks{3, 1, 2, 0, 5, 4};
    const int64_t S = static_cast<int64_t>(p.ids.size());
    const Tensor logits =
        test::chunked_prefill(*lm, p.ids, embed_rows, feats, 7, blocks, p.positions, 3);
    const fs::path out = w.dir / "video_logits.bin";
    char spg[32];
    std::snprintf(spg, sizeof spg, "%g", seconds);
    test::run_ref("qwen2_5_vl_ref.py", "logits --model " + w.dir.string() + " --ids " +
                                           test::csv(p.ids) + " --video-pixels " + vpix.string() +
                                           " --video-grid " + vgrid.string() +
                                           " --second-per-grid " + spg + " --out " + out.string());
    const auto ref = test::file_bytes(out);
    const int64_t V = logits.dim(1);
    ASSERT_EQ(ref.size(), static_cast<size_t>(S * V * 4));
    const float* want = reinterpret_cast<const float*>(ref.data()) + (S - 1) * V;
    EXPECT_LE(rel_err(logits.data<float>(), want, static_cast<size_t>(V)), 1e-4);
    lasts.emplace_back(logits.data<float>(), logits.data<float>() + V);
  }
  EXPECT_NE(lasts[0], lasts[1]) << "the slice duration did not move the positions";
}
