// Fuyu image preprocessing: config loading, the geometry (downscale, pad, crop, patch grid) and
// the fused pad + rescale + normalise + crop + patchify straight from the resized uint8 image,
// every value a lookup in media::normalize_lut's table.
#include "models/fuyu/image_processor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/json_fields.h"
#include "media/normalize.h"

namespace mmrt::models::fuyu {

using media::Image;
using media::MediaContext;
using media::ResizeFilter;

namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------- configuration

// size / patch_size: {"height": H, "width": W}, nothing else.
void read_hw(const json& v, const std::string& key, const std::string& origin, int64_t& h,
             int64_t& w) {
  if (!v.is_object())
    throw FormatError(origin + ": \"" + key + "\" must be {\"height\": H, \"width\": W}, got " +
                      io::json_excerpt(v));
  for (const auto& [k, x] : v.items())
    if (k != "height" && k != "width" && !x.is_null())
      throw Unimplemented(origin + ": \"" + key + "." + k + "\" is not supported (" + key +
                          " takes \"height\" and \"width\")");
  for (const char* k : {"height", "width"})
    if (!v.contains(k) || v[k].is_null())
      throw FormatError(origin + ": \"" + key + "\" lacks \"" + k + "\", got " +
                        io::json_excerpt(v));
  h = io::json_int_value(v["height"], key + ".height", origin);
  w = io::json_int_value(v["width"], key + ".width", origin);
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

std::string hw(int64_t h, int64_t w) {
  return std::to_string(h) + "x" + std::to_string(w);
}

// What is wrong with a configuration, or "".
std::string config_problem(const ImageProcessorConfig& c) {
  auto side = [](const char* what, int64_t v, int64_t max) {
    return v >= 1 && v <= max ? std::string()
                              : std::string(what) + " " + std::to_string(v) + " is not in 1.." +
                                    std::to_string(max);
  };
  std::string p;
  if (p = side("size.height", c.target_height, kMaxTargetSide); !p.empty()) return p;
  if (p = side("size.width", c.target_width, kMaxTargetSide); !p.empty()) return p;
  if (p = side("patch_size.height", c.patch_height, kMaxPatchSide); !p.empty()) return p;
  if (p = side("patch_size.width", c.patch_width, kMaxPatchSide); !p.empty()) return p;
  if (!(c.padding_value >= 0.0 && c.padding_value <= 255.0))
    return "padding_value " + std::to_string(c.padding_value) +
           " is not in 0..255 (it is stored into the uint8 image)";
  for (double s : c.image_std)
    if (s == 0.0 || !std::isfinite(s)) return "image_std has a zero or non-finite entry";
  for (double m : c.image_mean)
    if (!std::isfinite(m)) return "image_mean has a non-finite entry";
  if (!std::isfinite(c.rescale_factor)) return "rescale_factor is not finite";
  if (c.resample != ResizeFilter::kBilinear && c.resample != ResizeFilter::kBicubic)
    return "resample is neither bilinear nor bicubic";
  // With a resize or a pad, no crop is larger than `size` rounded up to whole patches.
  if (c.do_resize || c.do_pad) {
    const int64_t rows = ceil_div(c.target_height, c.patch_height);
    const int64_t cols = ceil_div(c.target_width, c.patch_width);
    if (rows * cols > kMaxPatches)
      return "size " + hw(c.target_height, c.target_width) + " in patches of " +
             hw(c.patch_height, c.patch_width) + " makes up to " + std::to_string(rows * cols) +
             " patches an image, over the " + std::to_string(kMaxPatches) + " allowed";
    const int64_t bytes = rows * c.patch_height * cols * c.patch_width * 3 * 4;
    if (bytes > kMaxOutputBytes)
      return "size " + hw(c.target_height, c.target_width) + " in patches of " +
             hw(c.patch_height, c.patch_width) + " makes up to " + std::to_string(bytes) +
             " bytes of patches an image, over the " + std::to_string(kMaxOutputBytes) + " allowed";
  }
  return {};
}

void check_config(const ImageProcessorConfig& c) {
  if (std::string p = config_problem(c); !p.empty())
    throw InvalidArgument("fuyu: invalid image processor configuration: " + p);
}

}  // namespace

ImageProcessorConfig ImageProcessorConfig::from_json(std::string_view text,
                                                     const std::string& origin) {
  const json j = io::parse_json_object(text, origin);
  ImageProcessorConfig c;
  auto has = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  if (has("size")) read_hw(j["size"], "size", origin, c.target_height, c.target_width);
  if (has("patch_size"))
    read_hw(j["patch_size"], "patch_size", origin, c.patch_height, c.patch_width);
  if (has("padding_value"))
    c.padding_value = io::json_number_value(j["padding_value"], "padding_value", origin);
  if (has("padding_mode")) {
    const json& m = j["padding_mode"];
    if (!m.is_string())
      throw FormatError(origin + ": \"padding_mode\" must be a string, got " + io::json_excerpt(m));
    if (m.get<std::string>() != "constant")
      throw Unimplemented(origin + ": \"padding_mode\" " + io::json_excerpt(m) +
                          " is not supported (only \"constant\" is)");
  }
  if (has("image_mean")) c.image_mean = io::json_rgb_value(j["image_mean"], "image_mean", origin);
  if (has("image_std")) c.image_std = io::json_rgb_value(j["image_std"], "image_std", origin);
  if (has("rescale_factor"))
    c.rescale_factor = io::json_number_value(j["rescale_factor"], "rescale_factor", origin);
  auto flag = [&](const char* key, bool& out) {
    if (!has(key)) return;
    if (!j[key].is_boolean())
      throw FormatError(origin + ": \"" + key + "\" must be true or false, got " +
                        io::json_excerpt(j[key]));
    out = j[key].get<bool>();
  };
  flag("do_resize", c.do_resize);
  flag("do_pad", c.do_pad);
  flag("do_rescale", c.do_rescale);
  flag("do_normalize", c.do_normalize);
  if (has("resample")) {
    const int64_t r = io::json_int_value(j["resample"], "resample", origin);
    if (r == 2)
      c.resample = ResizeFilter::kBilinear;
    else if (r == 3)
      c.resample = ResizeFilter::kBicubic;
    else
      throw Unimplemented(origin + ": \"resample\" filter " + std::to_string(r) +
                          " is not supported (2 = bilinear and 3 = bicubic are)");
  }
  if (std::string p = config_problem(c); !p.empty()) throw FormatError(origin + ": " + p);
  return c;
}

ImageProcessorConfig ImageProcessorConfig::load(const std::string& path) {
  return from_json(io::read_text_file(path), path);
}

ImageGeometry image_geometry(int64_t height, int64_t width, const ImageProcessorConfig& cfg) {
  check_config(cfg);
  if (height < 1 || width < 1 || height > kMaxSourceSide || width > kMaxSourceSide)
    throw InvalidArgument("fuyu: image size " + hw(height, width) +
                          " (height x width) is not positive or too large");
  ImageGeometry g;
  g.resized_height = height;
  g.resized_width = width;
  const int64_t th = cfg.target_height, tw = cfg.target_width;
  if (cfg.do_resize && (height > th || width > tw)) {
    // FuyuImageProcessor.resize: the smaller of the two scale factors, sides truncated.
    const double s = std::min(static_cast<double>(th) / static_cast<double>(height),
                              static_cast<double>(tw) / static_cast<double>(width));
    g.resized_height = static_cast<int64_t>(static_cast<double>(height) * s);
    g.resized_width = static_cast<int64_t>(static_cast<double>(width) * s);
    if (g.resized_height < 1 || g.resized_width < 1)
      throw InvalidArgument(
          "fuyu: an image of " + hw(height, width) + " (height x width) would be downscaled to " +
          hw(g.resized_height, g.resized_width) + ": its aspect ratio is too extreme");
  }
  const int64_t rh = g.resized_height, rw = g.resized_width;
  int64_t ph = rh, pw = rw;  // the padded size
  if (cfg.do_pad) {
    if (rh > th || rw > tw)
      throw InvalidArgument("fuyu: an image of " + hw(rh, rw) +
                            " (height x width) is larger than the " + hw(th, tw) +
                            " it is padded to (do_pad without do_resize)");
    ph = th, pw = tw;
  }
  // FuyuProcessor: crop to the resized size rounded up to whole patches, within the padding.
  const int64_t ch = std::min(ph, ceil_div(rh, cfg.patch_height) * cfg.patch_height);
  const int64_t cw = std::min(pw, ceil_div(rw, cfg.patch_width) * cfg.patch_width);
  if (ch % cfg.patch_height != 0 || cw % cfg.patch_width != 0)
    throw InvalidArgument("fuyu: the " + hw(ch, cw) + " crop of an image of " + hw(rh, rw) +
                          " (height x width) is not a whole number of " +
                          hw(cfg.patch_height, cfg.patch_width) + " patches");
  g.rows = ch / cfg.patch_height;
  g.cols = cw / cfg.patch_width;
  if (g.n_patches() > kMaxPatches)
    throw InvalidArgument("fuyu: an image of " + hw(rh, rw) + " (height x width) makes " +
                          std::to_string(g.n_patches()) + " patches, over the " +
                          std::to_string(kMaxPatches) + " allowed");
  if (g.n_patches() * cfg.patch_height * cfg.patch_width * 3 * 4 > kMaxOutputBytes)
    throw InvalidArgument("fuyu: the patches of an image of " + hw(rh, rw) +
                          " (height x width) would take more than " +
                          std::to_string(kMaxOutputBytes) + " bytes");
  return g;
}

namespace {

// The normalised value of each (channel, byte), and of the pad byte.
struct Lut {
  media::NormalizeLut v;
  float pad[3];
};

Lut make_lut(const ImageProcessorConfig& cfg) {
  Lut t{media::normalize_lut(cfg.image_mean, cfg.image_std, cfg.rescale_factor, cfg.do_rescale,
                             cfg.do_normalize),
        {}};
  // numpy stores the pad value into the uint8 image with a C cast (truncation).
  const auto pad_byte = static_cast<uint8_t>(cfg.padding_value);
  for (int c = 0; c < 3; ++c) t.pad[c] = t.v.v[c][pad_byte];
  return t;
}

// Tile rows [r0, r1) of the crop of `img` (the resized image, its padding implied) into `out`.
void patchify_rows(const Image& img, const ImageGeometry& g, const ImageProcessorConfig& cfg,
                   const Lut& lut, float* out, int64_t r0, int64_t r1) {
  const int64_t PH = cfg.patch_height, PW = cfg.patch_width;
  const int64_t D = PH * PW * 3;
  const int64_t H = img.height(), W = img.width();
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t py = 0; py < PH; ++py) {
      const int64_t y = r * PH + py;
      const uint8_t* src = y < H ? img.row(static_cast<int>(y)) : nullptr;
      for (int64_t c = 0; c < g.cols; ++c) {
        float* d = out + (r * g.cols + c) * D + py * PW * 3;
        const int64_t x0 = c * PW;
        // Pixels [0, n) of this patch row are the image's, the rest padding.
        const int64_t n = src ? std::clamp<int64_t>(W - x0, 0, PW) : 0;
        const uint8_t* s = src ? src + 3 * x0 : nullptr;
        for (int64_t px = 0; px < n; ++px) {
          d[3 * px + 0] = lut.v.v[0][s[3 * px + 0]];
          d[3 * px + 1] = lut.v.v[1][s[3 * px + 1]];
          d[3 * px + 2] = lut.v.v[2][s[3 * px + 2]];
        }
        for (int64_t px = n; px < PW; ++px) {
          d[3 * px + 0] = lut.pad[0];
          d[3 * px + 1] = lut.pad[1];
          d[3 * px + 2] = lut.pad[2];
        }
      }
    }
  }
}

}  // namespace

ImageInputs preprocess_image(const Image& rgb, const ImageProcessorConfig& cfg,
                             const MediaContext& ctx) {
  if (rgb.empty())
    throw InvalidArgument("fuyu::preprocess_image: the image is empty (" +
                          hw(rgb.height(), rgb.width()) + ", height x width)");
  Stopwatch sw;
  ImageInputs r;
  r.height = rgb.height();
  r.width = rgb.width();
  r.geometry = image_geometry(r.height, r.width, cfg);
  const ImageGeometry& g = r.geometry;

  // The downscale (PIL returns a copy when the size is unchanged: the pixels are the same, so the
  // decoded image is used as it is).
  Image resized;
  const Image* img = &rgb;
  if (g.resized_height != r.height || g.resized_width != r.width) {
    resized = media::resize(rgb, static_cast<int>(g.resized_width),
                            static_cast<int>(g.resized_height), cfg.resample, ctx);
    img = &resized;
  }

  const int64_t D = cfg.patch_height * cfg.patch_width * 3;
  const int64_t n = g.n_patches();
  std::shared_ptr<uint8_t> mem =
      media::features_buffer(ctx, static_cast<size_t>(n * D) * sizeof(float));
  r.patches = Tensor::view(mem.get(), DType::kF32, {n, D}, mem);
  float* out = r.patches.data<float>();
  const Lut lut = make_lut(cfg);
  if (ctx.pool && ctx.pool->size() > 1 && g.rows > 1 && n * D >= (int64_t{1} << 16))
    ctx.pool->parallel_for(
        g.rows, 1, [&](int64_t b, int64_t e) { patchify_rows(*img, g, cfg, lut, out, b, e); });
  else
    patchify_rows(*img, g, cfg, lut, out, 0, g.rows);
  r.preprocess_ms = sw.millis();
  return r;
}

ImageInputs preprocess_image(std::span<const uint8_t> file_bytes, const ImageProcessorConfig& cfg,
                             const PreprocessOptions& opts) {
  check_config(cfg);
  Stopwatch sw;
  const media::DecodeOptions dopt{.max_pixels = opts.max_source_pixels,
                                  .buffers = opts.ctx.buffers};
  // Refuse what the header alone shows to be unusable before decoding anything.
  const media::ImageInfo info = media::probe_image(file_bytes, dopt);
  image_geometry(info.height, info.width, cfg);
  const Image rgb = media::decode_image(file_bytes, dopt);
  const double decode_ms = sw.millis();
  ImageInputs r = preprocess_image(rgb, cfg, opts.ctx);
  r.decode_ms = decode_ms;
  return r;
}

}  // namespace mmrt::models::fuyu
