// LLaVA image preprocessing: the anyres geometry against the spec's table, config parsing, and
// pixel_values bit-identical to the PIL + numpy reference written from transformers' PIL path
// (tests/reference/llava_image_ref.py), with the grid and token counts of every image.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "../media/expect_error.h"
#include "../media/media_test_util.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "models/llava/anyres.h"
#include "models/llava/image_processor.h"

using namespace mmrt;
using namespace mmrt::models::llava;
using namespace media_test;

namespace {

const RefRun& llava_ref() {
  static const RefRun data("llava_image_ref.py", "llava_image_ref");
  return data;
}

// Bitwise float comparison (NaN-safe, -0 != +0) with the first mismatch reported.
::testing::AssertionResult same_floats(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << got.describe() << " vs " << want.describe();
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < got.numel(); ++i)
    if (std::memcmp(&g[i], &w[i], 4) != 0 && bad++ == 0) first = i;
  if (bad == 0) return ::testing::AssertionSuccess();
  const int64_t plane = got.dim(2) * got.dim(3);
  return ::testing::AssertionFailure()
         << bad << " of " << got.numel() << " values differ; first at crop " << first / (3 * plane)
         << " channel " << first / plane % 3 << " y " << first % plane / got.dim(3) << " x "
         << first % got.dim(3) << ": " << g[first] << " vs " << w[first];
}

Resolution res(const nlohmann::json& j) {
  return {j[0].get<int64_t>(), j[1].get<int64_t>()};
}

const std::vector<Resolution> kDefaultPinpoints{
    {336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}};

}  // namespace

TEST(LlavaImage, AnyresGeometryMatchesSpecTable) {
  struct Row {
    Resolution in, best, fitted;
    int64_t pad_a, pad_b, n_crops;  // padding top / bottom, or left / right
  };
  for (const Row& r : {Row{{480, 640}, {672, 672}, {504, 672}, 84, 84, 5},
                       Row{{1080, 1920}, {672, 672}, {378, 672}, 147, 147, 5},
                       Row{{336, 336}, {336, 672}, {336, 336}, 168, 168, 3},
                       Row{{800, 300}, {1008, 336}, {897, 336}, 55, 56, 4}}) {
    SCOPED_TRACE(std::to_string(r.in.height) + "x" + std::to_string(r.in.width));
    const Resolution best = select_best_resolution(r.in, kDefaultPinpoints);
    EXPECT_EQ(best, r.best);
    const Resolution fitted = patch_output_size(r.in, best);
    EXPECT_EQ(fitted, r.fitted);
    const bool vertical = fitted.width == best.width;
    const int64_t gap = vertical ? best.height - fitted.height : best.width - fitted.width;
    EXPECT_EQ(gap / 2, r.pad_a);
    EXPECT_EQ(gap - gap / 2, r.pad_b);
    const ImageLayout l = image_layout(r.in, {.pinpoints = kDefaultPinpoints});
    EXPECT_EQ(l.best, r.best);
    EXPECT_EQ(l.n_crops, r.n_crops);
    EXPECT_EQ(l.tile_rows, r.best.height / 336);
    EXPECT_EQ(l.tile_cols, r.best.width / 336);
    EXPECT_EQ(l.side, 24);
    EXPECT_EQ(l.base_tokens, 576);
  }
  // 480x640 by hand: a 48x48 map, new height round(480 * 48 / 640) = 36, 6 rows off each side.
  const ImageLayout l = image_layout({480, 640}, {.pinpoints = kDefaultPinpoints});
  EXPECT_EQ(l.top, 6);
  EXPECT_EQ(l.rows, 36);
  EXPECT_EQ(l.left, 0);
  EXPECT_EQ(l.cols, 48);
  EXPECT_EQ(l.n_tokens, 576 + 36 * 49);
  const ImageLayout cls = image_layout(
      {480, 640}, {.pinpoints = kDefaultPinpoints, .keep_cls = true, .newline = false});
  EXPECT_EQ(cls.base_tokens, 577);
  EXPECT_EQ(cls.n_tokens, 577 + 36 * 48);
  // LLaVA-1.5: one crop, no grid.
  const ImageLayout one = image_layout({480, 640}, {});
  EXPECT_EQ(one.n_crops, 1);
  EXPECT_EQ(one.tile_rows, 0);
  EXPECT_EQ(one.tile_cols, 0);
  EXPECT_EQ(one.rows, 0);
  EXPECT_EQ(one.cols, 0);
  EXPECT_EQ(one.n_tokens, 576);
}

TEST(LlavaImage, Round7AndLayoutValidation) {
  EXPECT_EQ(round7_to_int(35.99999999), 36);  // within 5e-8 of the integer above
  EXPECT_EQ(round7_to_int(35.9999), 35);
  EXPECT_EQ(round7_to_int(36.0), 36);
  EXPECT_EQ(round7_to_int(0.0), 0);
  EXPECT_THROW(round7_to_int(-1.0), InvalidArgument);
  expect_error<InvalidArgument>([] { select_best_resolution({480, 640}, {}); }, {"empty"});
  expect_error<InvalidArgument>(
      [] {
        select_best_resolution({0, 640}, kDefaultPinpoints);
      },
      {"0x640"});
  expect_error<InvalidArgument>([] { patch_output_size({480, 640}, {672, -1}); }, {"672x-1"});
  expect_error<InvalidArgument>(
      [] {
        image_layout({480, 640}, {.pinpoints = {{336, 500}}});
      },
      {"336x500", "multiple"});
  expect_error<InvalidArgument>(
      [] {
        image_layout({480, 640}, {.pinpoints = {{336 * 8, 336 * 8}}});
      },
      {"64"});
  expect_error<InvalidArgument>(
      [] {
        image_layout({480, 640}, {.crop = 336, .patch = 0});
      },
      {"patch"});
  expect_error<InvalidArgument>([] { image_layout({480, 0}, {}); }, {"480x0"});
  // A larger effective area wins; on a tie the smaller waste, then the first in order.
  EXPECT_EQ(select_best_resolution({200, 200}, std::vector<Resolution>{{100, 200}, {200, 200}}),
            (Resolution{200, 200}));
  EXPECT_EQ(select_best_resolution({100, 100}, std::vector<Resolution>{{200, 200}, {100, 200}}),
            (Resolution{100, 200}));
  EXPECT_EQ(select_best_resolution({100, 100}, std::vector<Resolution>{{200, 100}, {100, 200}}),
            (Resolution{200, 100}));
}

TEST(LlavaImage, ConfigFromJson) {
  const ImageProcessorConfig d = ImageProcessorConfig::from_json("{}", "t.json", true);
  EXPECT_EQ(d.shortest_edge, 336);
  EXPECT_EQ(d.crop_height, 336);
  EXPECT_EQ(d.grid_pinpoints, kDefaultPinpoints);
  EXPECT_EQ(d.resample, media::ResizeFilter::kBicubic);
  EXPECT_TRUE(ImageProcessorConfig::from_json("{}", "t.json", false).grid_pinpoints.empty());
  const ImageProcessorConfig c = ImageProcessorConfig::from_json(
      R"({"size": {"height": 300, "width": 400}, "crop_size": 224, "resample": 2,
          "image_mean": 0.5, "image_grid_pinpoints": [[1, 2]], "do_center_crop": false,
          "do_convert_rgb": true, "image_processor_type": "CLIPImageProcessor"})",
      "t.json", false);
  EXPECT_EQ(c.size_height, 300);
  EXPECT_EQ(c.size_width, 400);
  EXPECT_EQ(c.crop_height, 224);
  EXPECT_EQ(c.crop_width, 224);
  EXPECT_EQ(c.resample, media::ResizeFilter::kBilinear);
  EXPECT_EQ(c.image_mean[2], 0.5);
  EXPECT_FALSE(c.do_center_crop);
  EXPECT_TRUE(c.grid_pinpoints.empty());
  const ImageProcessorConfig n = ImageProcessorConfig::from_json(
      R"({"size": 384, "image_grid_pinpoints": [[336, 1008], [1008, 336]]})", "t.json", true);
  EXPECT_EQ(n.shortest_edge, 384);
  EXPECT_EQ(n.grid_pinpoints, (std::vector<Resolution>{{336, 1008}, {1008, 336}}));
  EXPECT_EQ(ImageProcessorConfig::from_json(R"({"size": [320, 320]})", "t", true).size_height, 320);

  auto parse = [](const char* text, bool anyres = true) {
    return [text, anyres] { ImageProcessorConfig::from_json(text, "t.json", anyres); };
  };
  expect_error<Unimplemented>(parse(R"({"resample": 1})"), {"t.json", "resample filter 1"});
  expect_error<Unimplemented>(parse(R"({"size": {"shortest_edge": 336, "longest_edge": 500}})"),
                              {"size.longest_edge"});
  expect_error<Unimplemented>(parse(R"({"size": {"height": 336, "width": 500}})"), {"square"});
  EXPECT_NO_THROW(parse(R"({"size": {"height": 336, "width": 500}})", false)());
  expect_error<FormatError>(parse("{not json"), {"t.json"});
  expect_error<FormatError>(parse(R"({"size": {"height": 336}})"), {"size"});
  expect_error<FormatError>(parse(R"({"crop_size": 0})"), {"crop_size.height"});
  expect_error<FormatError>(parse(R"({"crop_size": {"height": "336", "width": 336}})"),
                            {"crop_size.height"});
  expect_error<FormatError>(parse(R"({"image_grid_pinpoints": []})"), {"image_grid_pinpoints"});
  expect_error<FormatError>(parse(R"({"image_grid_pinpoints": [[336, 672, 1]]})"),
                            {"image_grid_pinpoints[0]"});
  expect_error<FormatError>(parse(R"({"image_grid_pinpoints": [[336, 0]]})"), {"336x0"});
  expect_error<FormatError>(parse(R"({"image_grid_pinpoints": [[3360, 3360]]})"),
                            {"3360x3360", "64"});
  expect_error<FormatError>(parse(R"({"image_std": [1, 0, 1]})"), {"image_std"});
  expect_error<FormatError>(parse(R"({"do_resize": 1})"), {"do_resize"});
  EXPECT_THROW(ImageProcessorConfig::load("/nonexistent/preprocessor_config.json", true), NotFound);
}

TEST(LlavaImage, PixelValuesIdenticalToReference) {
  const RefRun& ref = llava_ref();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  ThreadPool pool(4);
  int n = 0, anyres_cases = 0, partial = 0;
  for (const auto& c : ref.manifest["cases"]) {
    const std::string file = c["file"], cname = c["config"];
    SCOPED_TRACE(file + " with " + cname);
    const auto& meta = ref.manifest["configs"][cname];
    const bool anyres = meta["anyres"].get<bool>();
    const ImageProcessorConfig cfg =
        ImageProcessorConfig::load((ref.dir / meta["file"].get<std::string>()).string(), anyres);
    const std::vector<uint8_t> bytes = read_bytes(ref.dir / file);
    const Tensor want = read_npy((ref.dir / c["pixel_values"].get<std::string>()).string());
    const ImageInputs got = preprocess_image(bytes, cfg);
    EXPECT_TRUE(same_floats(got.pixel_values, want));
    EXPECT_EQ(got.original, res(c["image_size"]));
    EXPECT_EQ(got.pixel_values.dim(0), c["n_crops"].get<int64_t>());
    if (anyres) {
      ++anyres_cases;
      EXPECT_EQ(got.best, res(c["best"]));
      EXPECT_EQ(got.fitted, res(c["fitted"]));
    } else {
      EXPECT_EQ(got.best, Resolution{});
    }
    const LayoutParams lp{.pinpoints = cfg.grid_pinpoints, .crop = cfg.crop_height, .patch = 14};
    if (!c["tokens"].is_null()) {
      const ImageLayout l = image_layout(got.original, lp);
      EXPECT_EQ(l.n_tokens, c["tokens"].get<int64_t>());
      EXPECT_EQ(l.n_crops, got.pixel_values.dim(0));
      if (anyres) {
        EXPECT_EQ(l.best, got.best);
      }
    } else if (anyres) {  // tiles that are not a multiple of the crop: no token layout
      ++partial;
      EXPECT_THROW(image_layout(got.original, lp), InvalidArgument);
    }
    // The same through a thread pool, and from an already decoded image.
    EXPECT_TRUE(
        same_floats(preprocess_image(bytes, cfg, {.ctx = {.pool = &pool}}).pixel_values, want));
    EXPECT_TRUE(same_floats(preprocess_image(media::decode_image(bytes), cfg).pixel_values, want));
    ++n;
  }
  EXPECT_GE(n, 50);
  EXPECT_GE(anyres_cases, 20);
  EXPECT_GE(partial, 3);
}

// Padded pixels are zero on the uint8 image, so they normalise to -mean / std in float32.
TEST(LlavaImage, PaddingNormalisesToMinusMeanOverStd) {
  media::Image im(640, 480);
  std::memset(im.data(), 200, im.size_bytes());
  ImageProcessorConfig cfg;
  cfg.grid_pinpoints = kDefaultPinpoints;
  const ImageInputs r = preprocess_image(im, cfg);
  ASSERT_EQ(r.pixel_values.shape(), (Shape{5, 3, 336, 336}));
  const float* p = r.pixel_values.data<float>();
  const int64_t plane = 336 * 336;
  for (int c = 0; c < 3; ++c) {
    const float pad =
        (0.0f - static_cast<float>(cfg.image_mean[c])) / static_cast<float>(cfg.image_std[c]);
    const float full =
        (static_cast<float>(200 * (1.0 / 255.0)) - static_cast<float>(cfg.image_mean[c])) /
        static_cast<float>(cfg.image_std[c]);
    const float* tile0 = p + (1 * 3 + c) * plane;  // grid row 0: 84 padded rows on top
    EXPECT_EQ(tile0[0], pad);
    EXPECT_EQ(tile0[83 * 336 + 100], pad);
    EXPECT_EQ(tile0[84 * 336 + 100], full);
    const float* tile3 = p + (4 * 3 + c) * plane;  // grid row 1: 84 padded rows at the bottom
    EXPECT_EQ(tile3[251 * 336 + 5], full);
    EXPECT_EQ(tile3[252 * 336 + 5], pad);
    EXPECT_EQ(p[c * plane + 12345], full);  // the base crop has no padding
  }
}

TEST(LlavaImage, BadInputGivesErrors) {
  const RefRun& ref = llava_ref();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  ImageProcessorConfig cfg;
  cfg.grid_pinpoints = kDefaultPinpoints;
  int n = 0;
  for (const auto& e : ref.manifest["errors"]) {
    const std::string file = e["file"];
    SCOPED_TRACE(file);
    EXPECT_NE(e["pil"].get<std::string>(), "ok");  // PIL refuses it too
    const std::vector<uint8_t> bytes = read_bytes(ref.dir / file);
    try {
      preprocess_image(bytes, cfg);
      ADD_FAILURE() << "no error";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()), "");
    } catch (const std::exception& err) {
      ADD_FAILURE() << "not an mmrt error: " << err.what();
    }
    ++n;
  }
  EXPECT_EQ(n, 4);
  const std::vector<uint8_t> jpg = read_bytes(ref.dir / "img" / "coffee_480x640.jpg");
  EXPECT_THROW(preprocess_image(jpg, cfg, {.max_source_pixels = 1000}), ResourceExhausted);

  expect_error<InvalidArgument>([&] { preprocess_image(media::Image(), cfg); }, {"empty"});
  // A 1 x 100000 strip: the shortest-edge resize would be 336 x 33.6 million pixels.
  media::Image strip(100000, 1);
  std::memset(strip.data(), 9, strip.size_bytes());
  expect_error<InvalidArgument>([&] { preprocess_image(strip, ImageProcessorConfig{}); },
                                {"aspect ratio"});
  // Configurations built in code are checked as the JSON ones are.
  ImageProcessorConfig bad = cfg;
  bad.crop_height = 0;
  expect_error<InvalidArgument>([&] { preprocess_image(jpg, bad); }, {"crop_size.height"});
  bad = cfg;
  bad.grid_pinpoints = {{336 * 8, 336 * 8}};
  expect_error<InvalidArgument>([&] { preprocess_image(jpg, bad); }, {"64"});
  bad = cfg;
  bad.image_std[1] = 0;
  expect_error<InvalidArgument>([&] { preprocess_image(jpg, bad); }, {"image_std"});
  // Crops that do not come out one size cannot stack: without the centre crop, the partial
  // 112 x 224 tiles of a 336 x 672 grid resize to 224 x 448, the others to 224 x 224.
  bad = cfg;
  bad.do_center_crop = false;
  bad.shortest_edge = bad.crop_height = bad.crop_width = 224;
  media::Image square(336, 336);
  std::memset(square.data(), 50, square.size_bytes());
  expect_error<InvalidArgument>([&] { preprocess_image(square, bad); }, {"stacked"});
  bad.do_center_crop = true;  // with it they do
  EXPECT_EQ(preprocess_image(square, bad).pixel_values.dim(0), 7);
}
