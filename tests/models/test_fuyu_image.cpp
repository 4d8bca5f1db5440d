// Fuyu image preprocessing: the geometry against the spec's table and edge sizes, config parsing,
// and patches bit-identical to the PIL + numpy reference written from transformers'
// FuyuImageProcessor + FuyuProcessor (tests/reference/fuyu_image_ref.py), with the resized size,
// crop, grid and token count of every image, and errors where transformers raises.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "../media/expect_error.h"
#include "../media/media_test_util.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "models/fuyu/image_processor.h"

using namespace mmrt;
using namespace mmrt::models::fuyu;
using namespace media_test;

namespace {

const RefRun& fuyu_ref() {
  static const RefRun data("fuyu_image_ref.py", "fuyu_image_ref");
  return data;
}

// Bitwise float comparison (NaN-safe, -0 != +0) with the first mismatch reported.
::testing::AssertionResult same_floats(const Tensor& got, const Tensor& want, int64_t patch_w) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << got.describe() << " vs " << want.describe();
  if (want.dtype() != DType::kF32)
    return ::testing::AssertionFailure() << "reference is " << want.describe();
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < got.numel(); ++i)
    if (std::memcmp(&g[i], &w[i], 4) != 0 && bad++ == 0) first = i;
  if (bad == 0) return ::testing::AssertionSuccess();
  const int64_t D = got.dim(1), k = first % D;
  return ::testing::AssertionFailure()
         << bad << " of " << got.numel() << " values differ; first at patch " << first / D << " py "
         << k / 3 / patch_w << " px " << k / 3 % patch_w << " c " << k % 3 << ": " << g[first]
         << " vs " << w[first];
}

std::pair<int64_t, int64_t> pair_of(const nlohmann::json& j) {
  return {j[0].get<int64_t>(), j[1].get<int64_t>()};
}

media::Image filled(int w, int h, uint8_t v) {
  media::Image im(w, h);
  std::memset(im.data(), v, im.size_bytes());
  return im;
}

}  // namespace

TEST(FuyuImage, GeometryMatchesSpecTable) {
  const ImageProcessorConfig cfg;
  struct Row {
    int64_t h, w, rh, rw, rows, cols, tiles, tokens;
  };
  for (const Row& r : {Row{480, 640, 480, 640, 16, 22, 352, 368},  // crop 480 x 660
                       Row{2000, 3000, 1080, 1620, 36, 54, 1944, 1980},
                       Row{1500, 1000, 1080, 720, 36, 24, 864, 900}}) {
    SCOPED_TRACE(std::to_string(r.h) + "x" + std::to_string(r.w));
    const ImageGeometry g = image_geometry(r.h, r.w, cfg);
    EXPECT_EQ(g.resized_height, r.rh);
    EXPECT_EQ(g.resized_width, r.rw);
    EXPECT_EQ(g.rows, r.rows);
    EXPECT_EQ(g.cols, r.cols);
    EXPECT_EQ(g.n_patches(), r.tiles);
    EXPECT_EQ(g.n_tokens(), r.tokens);
  }
  EXPECT_EQ(image_geometry(480, 640, cfg).cols * cfg.patch_width, 660);
}

TEST(FuyuImage, GeometryEdges) {
  const ImageProcessorConfig cfg;
  auto geo = [&](int64_t h, int64_t w) { return image_geometry(h, w, cfg); };
  // Exactly the target: no resize, no padding row or column survives the crop.
  ImageGeometry g = geo(1080, 1920);
  EXPECT_EQ(g.resized_height, 1080);
  EXPECT_EQ(g.resized_width, 1920);
  EXPECT_EQ(g.n_tokens(), 36 * 65);
  // One pixel over on each side: 1080 x 1919, the crop rounds the width back up to 1920.
  g = geo(1081, 1921);
  EXPECT_EQ(g.resized_height, 1080);
  EXPECT_EQ(g.resized_width, 1919);
  EXPECT_EQ(g.cols, 64);
  g = geo(1080, 1921);  // the height is scaled too: int(1080 * 1920 / 1921) = 1079
  EXPECT_EQ(g.resized_height, 1079);
  EXPECT_EQ(g.resized_width, 1920);
  EXPECT_EQ(g.rows, 36);
  g = geo(1, 1);  // never upscaled; one patch of mostly padding
  EXPECT_EQ(g.resized_height, 1);
  EXPECT_EQ(g.n_patches(), 1);
  EXPECT_EQ(g.n_tokens(), 2);
  g = geo(29, 31);
  EXPECT_EQ(g.rows, 1);
  EXPECT_EQ(g.cols, 2);
  g = geo(7, 2000);
  EXPECT_EQ(g.resized_height, 6);
  EXPECT_EQ(g.resized_width, 1920);
  EXPECT_EQ(g.rows, 1);
  EXPECT_EQ(g.cols, 64);
  g = geo(3000, 7);
  EXPECT_EQ(g.resized_height, 1080);
  EXPECT_EQ(g.resized_width, 2);
  EXPECT_EQ(g.rows, 36);
  EXPECT_EQ(g.cols, 1);

  expect_error<InvalidArgument>([&] { geo(0, 640); }, {"0x640"});
  expect_error<InvalidArgument>([&] { geo(480, -3); }, {"480x-3"});
  expect_error<InvalidArgument>([&] { geo(1, 2500); }, {"1x2500", "0x1920"});  // downscaled to 0
  // Without the resize an image over `size` cannot be padded to it.
  ImageProcessorConfig c = cfg;
  c.do_resize = false;
  expect_error<InvalidArgument>([&] { image_geometry(1080, 1921, c); }, {"1080x1921", "do_pad"});
  EXPECT_EQ(image_geometry(480, 640, c).n_patches(), 352);
  // Without the pad the resized image must be whole patches itself.
  c = cfg;
  c.do_pad = false;
  expect_error<InvalidArgument>([&] { image_geometry(480, 640, c); }, {"480x640", "30x30"});
  EXPECT_EQ(image_geometry(2000, 3000, c).n_patches(), 1944);
  // Neither: the patch count of a huge image is bounded.
  c.do_resize = false;
  c.patch_height = c.patch_width = 1;
  expect_error<InvalidArgument>([&] { image_geometry(300, 300, c); }, {"90000", "65536"});
  EXPECT_EQ(image_geometry(200, 300, c).n_patches(), 60000);
}

TEST(FuyuImage, ConfigFromJson) {
  const ImageProcessorConfig d = ImageProcessorConfig::from_json("{}", "t.json");
  EXPECT_EQ(d.target_height, 1080);
  EXPECT_EQ(d.target_width, 1920);
  EXPECT_EQ(d.patch_height, 30);
  EXPECT_EQ(d.patch_width, 30);
  EXPECT_EQ(d.padding_value, 1.0);
  EXPECT_EQ(d.image_mean[1], 0.5);
  EXPECT_EQ(d.image_std[2], 0.5);
  EXPECT_EQ(d.rescale_factor, 1.0 / 255.0);
  EXPECT_TRUE(d.do_resize && d.do_pad && d.do_rescale && d.do_normalize);
  EXPECT_EQ(d.resample, media::ResizeFilter::kBilinear);
  const ImageProcessorConfig c = ImageProcessorConfig::from_json(
      R"({"size": {"height": 400, "width": 600}, "patch_size": {"height": 20, "width": 40},
          "padding_value": 7.5, "padding_mode": "constant", "image_mean": [0.1, 0.2, 0.3],
          "image_std": 0.25, "rescale_factor": 0.5, "do_resize": false, "do_pad": false,
          "do_rescale": false, "do_normalize": false, "resample": 3, "image_processor_type":
          "FuyuImageProcessor", "processor_class": "FuyuProcessor", "size_divisor": null})",
      "t.json");
  EXPECT_EQ(c.target_height, 400);
  EXPECT_EQ(c.target_width, 600);
  EXPECT_EQ(c.patch_height, 20);
  EXPECT_EQ(c.patch_width, 40);
  EXPECT_EQ(c.padding_value, 7.5);
  EXPECT_EQ(c.image_mean[2], 0.3);
  EXPECT_EQ(c.image_std[0], 0.25);
  EXPECT_EQ(c.rescale_factor, 0.5);
  EXPECT_FALSE(c.do_resize || c.do_pad || c.do_rescale || c.do_normalize);
  EXPECT_EQ(c.resample, media::ResizeFilter::kBicubic);
  EXPECT_EQ(ImageProcessorConfig::from_json(R"({"size": null, "resample": 2.0})", "t").target_width,
            1920);

  auto parse = [](const char* text) {
    return [text] { ImageProcessorConfig::from_json(text, "t.json"); };
  };
  expect_error<FormatError>(parse("{not json"), {"t.json"});
  expect_error<FormatError>(parse("[1]"), {"t.json"});
  expect_error<FormatError>(parse(R"({"size": 1080})"), {"\"size\""});
  expect_error<FormatError>(parse(R"({"size": {"height": 1080}})"), {"size", "width"});
  expect_error<FormatError>(parse(R"({"size": {"height": "1080", "width": 1920}})"),
                            {"size.height"});
  expect_error<Unimplemented>(parse(R"({"size": {"shortest_edge": 1080}})"),
                              {"size.shortest_edge"});
  expect_error<FormatError>(parse(R"({"patch_size": {"height": 30, "width": 0}})"),
                            {"patch_size.width"});
  expect_error<FormatError>(parse(R"({"patch_size": {"height": 30.5, "width": 30}})"),
                            {"patch_size.height"});
  expect_error<FormatError>(parse(R"({"size": {"height": 20000, "width": 1920}})"),
                            {"size.height", "16384"});
  // A one-pixel patch of a large target: millions of patches an image.
  expect_error<FormatError>(parse(R"({"patch_size": {"height": 1, "width": 1}})"),
                            {"patches", "65536"});
  expect_error<FormatError>(
      parse(R"({"size": {"height": 16384, "width": 16384}, "patch_size": {"height": 128,
                "width": 128}})"),
      {"bytes"});
  expect_error<FormatError>(parse(R"({"padding_value": -1})"), {"padding_value"});
  expect_error<FormatError>(parse(R"({"padding_value": 256})"), {"padding_value"});
  expect_error<FormatError>(parse(R"({"padding_value": "1"})"), {"padding_value"});
  expect_error<Unimplemented>(parse(R"({"padding_mode": "reflect"})"), {"padding_mode"});
  expect_error<FormatError>(parse(R"({"padding_mode": 0})"), {"padding_mode"});
  expect_error<FormatError>(parse(R"({"image_mean": [0.5, 0.5]})"), {"image_mean"});
  expect_error<FormatError>(parse(R"({"image_mean": [0.5, "a", 0.5]})"), {"image_mean[1]"});
  expect_error<FormatError>(parse(R"({"image_std": 0})"), {"image_std"});
  expect_error<FormatError>(parse(R"({"rescale_factor": "x"})"), {"rescale_factor"});
  expect_error<FormatError>(parse(R"({"do_pad": 1})"), {"do_pad"});
  expect_error<Unimplemented>(parse(R"({"resample": 1})"), {"resample", "1"});
  expect_error<FormatError>(parse(R"({"resample": "bilinear"})"), {"resample"});
  EXPECT_THROW(ImageProcessorConfig::load("/nonexistent/preprocessor_config.json"), NotFound);
}

TEST(FuyuImage, PatchesIdenticalToReference) {
  const RefRun& ref = fuyu_ref();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  ThreadPool pool(4);
  int n = 0, refused = 0;
  for (const auto& c : ref.manifest["cases"]) {
    const std::string file = c["file"], cname = c["config"];
    SCOPED_TRACE(file + " with " + cname);
    const ImageProcessorConfig cfg = ImageProcessorConfig::load(
        (ref.dir / ref.manifest["configs"][cname]["file"].get<std::string>()).string());
    const std::vector<uint8_t> bytes = read_bytes(ref.dir / file);
    const auto [h, w] = pair_of(c["image_size"]);
    if (c.contains("error")) {  // transformers raises: so must we, before decoding
      ++refused;
      expect_error<InvalidArgument>([&] { image_geometry(h, w, cfg); }, {"fuyu"});
      expect_error<InvalidArgument>([&] { preprocess_image(bytes, cfg); }, {"fuyu"});
      expect_error<InvalidArgument>([&] { preprocess_image(media::decode_image(bytes), cfg); },
                                    {"fuyu"});
      continue;
    }
    const Tensor want = read_npy((ref.dir / c["patches"].get<std::string>()).string());
    const ImageInputs got = preprocess_image(bytes, cfg);
    EXPECT_TRUE(same_floats(got.patches, want, cfg.patch_width));
    EXPECT_EQ(got.height, h);
    EXPECT_EQ(got.width, w);
    const ImageGeometry& g = got.geometry;
    EXPECT_EQ(std::make_pair(g.resized_height, g.resized_width), pair_of(c["resized"]));
    EXPECT_EQ(std::make_pair(g.rows * cfg.patch_height, g.cols * cfg.patch_width),
              pair_of(c["crop"]));
    EXPECT_EQ(std::make_pair(g.rows, g.cols), pair_of(c["grid"]));
    EXPECT_EQ(g.n_patches(), c["n_patches"].get<int64_t>());
    EXPECT_EQ(g.n_tokens(), c["tokens"].get<int64_t>());
    EXPECT_EQ(got.patches.dim(0), g.n_patches());
    EXPECT_EQ(got.patches.dim(1), cfg.patch_height * cfg.patch_width * 3);
    // What admission computes from the header alone is what preprocessing gives.
    const ImageGeometry a = image_geometry(h, w, cfg);
    EXPECT_EQ(a.resized_height, g.resized_height);
    EXPECT_EQ(a.resized_width, g.resized_width);
    EXPECT_EQ(a.n_tokens(), g.n_tokens());
    // The same through a thread pool (an AVX2 cap on the resize), and from a decoded image.
    EXPECT_TRUE(same_floats(
        preprocess_image(bytes, cfg, {.ctx = {.pool = &pool, .isa = Isa::kAvx2}}).patches, want,
        cfg.patch_width));
    EXPECT_TRUE(same_floats(preprocess_image(media::decode_image(bytes), cfg).patches, want,
                            cfg.patch_width));
    ++n;
  }
  EXPECT_GE(n, 39);
  EXPECT_GE(refused, 7);
}

// Pixels of the crop outside the resized image are the uint8 pad value, normalised.
TEST(FuyuImage, PaddingIsTheNormalisedPadByte) {
  ImageProcessorConfig cfg;
  const ImageInputs r = preprocess_image(filled(31, 29, 200), cfg);  // 29 x 31: 1 x 2 patches
  ASSERT_EQ(r.patches.shape(), (Shape{2, 2700}));
  const float pad = (static_cast<float>(1 * (1.0 / 255.0)) - 0.5f) / 0.5f;
  const float full = (static_cast<float>(200 * (1.0 / 255.0)) - 0.5f) / 0.5f;
  const float* p = r.patches.data<float>();
  auto at = [&](int patch, int py, int px, int c) {
    return p[patch * 2700 + (py * 30 + px) * 3 + c];
  };
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(at(0, 0, 0, c), full);
    EXPECT_EQ(at(0, 28, 29, c), full);
    EXPECT_EQ(at(0, 29, 0, c), pad);  // the 30th row
    EXPECT_EQ(at(1, 0, 0, c), full);  // column 30 is the image's last
    EXPECT_EQ(at(1, 0, 1, c), pad);
    EXPECT_EQ(at(1, 29, 29, c), pad);
  }
  // A fractional pad value is truncated into the uint8 image, as numpy stores it.
  cfg.padding_value = 254.9;
  cfg.do_normalize = false;
  const ImageInputs t = preprocess_image(filled(31, 29, 200), cfg);
  EXPECT_EQ(t.patches.data<float>()[2700 - 1], static_cast<float>(254 * (1.0 / 255.0)));
  // The output memory comes from the context's features allocator.
  size_t asked = 0;
  media::MediaContext ctx;
  ctx.features = [&](size_t bytes) {
    asked = bytes;
    return std::shared_ptr<uint8_t>(new uint8_t[bytes], std::default_delete<uint8_t[]>());
  };
  EXPECT_EQ(preprocess_image(filled(640, 480, 3), ImageProcessorConfig{}, ctx).patches.dim(0), 352);
  EXPECT_EQ(asked, size_t{352} * 2700 * 4);
}

TEST(FuyuImage, BadInputGivesErrors) {
  const RefRun& ref = fuyu_ref();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const ImageProcessorConfig cfg;
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
  EXPECT_THROW(preprocess_image(std::span<const uint8_t>(), cfg), Error);

  expect_error<InvalidArgument>([&] { preprocess_image(media::Image(), cfg); }, {"empty"});
  // Configurations built in code are checked as the JSON ones are, before anything is decoded.
  ImageProcessorConfig bad = cfg;
  bad.patch_height = bad.patch_width = 1;
  expect_error<InvalidArgument>([&] { preprocess_image(jpg, bad); }, {"patches", "65536"});
  expect_error<InvalidArgument>([&] { image_geometry(30, 30, bad); }, {"65536"});
  bad = cfg;
  bad.target_width = 0;
  expect_error<InvalidArgument>([&] { preprocess_image(filled(4, 4, 0), bad); }, {"size.width"});
  bad = cfg;
  bad.patch_height = 5000;
  expect_error<InvalidArgument>([&] { image_geometry(30, 30, bad); }, {"patch_size.height"});
  bad = cfg;
  bad.image_std[1] = 0;
  expect_error<InvalidArgument>([&] { preprocess_image(jpg, bad); }, {"image_std"});
  bad = cfg;
  bad.padding_value = 300;
  expect_error<InvalidArgument>([&] { preprocess_image(jpg, bad); }, {"padding_value"});
  // A thin strip downscales to zero rows: refused, not a zero-size resize.
  expect_error<InvalidArgument>([&] { preprocess_image(filled(2500, 1, 9), cfg); }, {"1x2500"});
}
