// LLaVA image preprocessing: config loading and the crop pipeline. Crops are windows ("views")
// onto a decoded or resized image, with zero outside the pixels they may see, so padding, tiling
// and centre cropping copy nothing; only a resize materialises a window. Values are computed as
// numpy does: float32(v * factor) in double, then (x - mean) / std in float32 with float32 copies
// of mean and std.
#include "models/llava/image_processor.h"

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

namespace mmrt::models::llava {

using media::Image;
using media::MediaContext;
using media::ResizeFilter;

namespace {

using json = nlohmann::json;

constexpr int64_t kMaxConfigSide = 2048;                // shortest_edge, size and crop sides
constexpr int64_t kMaxPinpointSide = 16384;             // a grid pinpoint's sides
constexpr int64_t kMaxResizePixels = int64_t{1} << 26;  // any intermediate image (192 MiB RGB)
constexpr int64_t kMaxOutputBytes = int64_t{1} << 30;   // pixel_values

// ---------------------------------------------------------------- configuration

constexpr auto& json_int = io::json_int_value;
constexpr auto& json_number = io::json_number_value;
constexpr auto& json_triple = io::json_rgb_value;

// transformers' get_size_dict for `size` (default_to_square=False): an int is the shortest edge,
// a pair is (height, width).
void read_size(const json& s, const std::string& origin, ImageProcessorConfig& c) {
  if (s.is_number()) {
    c.shortest_edge = json_int(s, "size", origin);
    return;
  }
  if (s.is_array() && s.size() == 2) {
    c.size_height = json_int(s[0], "size[0]", origin);
    c.size_width = json_int(s[1], "size[1]", origin);
    return;
  }
  if (!s.is_object())
    throw FormatError(origin + ": \"size\" must be an object, an int or [height, width], got " +
                      io::json_excerpt(s));
  for (const auto& [k, v] : s.items())
    if (k != "shortest_edge" && k != "height" && k != "width" && !v.is_null())
      throw Unimplemented(origin + ": \"size." + k + "\" is not supported (size takes " +
                          "\"shortest_edge\", or \"height\" and \"width\")");
  const bool se = s.contains("shortest_edge") && !s["shortest_edge"].is_null();
  const bool h = s.contains("height") && !s["height"].is_null();
  const bool w = s.contains("width") && !s["width"].is_null();
  if (h != w)
    throw FormatError(origin + ": \"size\" must have both \"height\" and \"width\", got " +
                      io::json_excerpt(s));
  if (se && h)
    throw FormatError(origin + ": \"size\" has both \"shortest_edge\" and \"height\"/\"width\"");
  if (!se && !h)
    throw FormatError(origin + ": \"size\" must contain \"shortest_edge\" or \"height\" and " +
                      "\"width\", got " + io::json_excerpt(s));
  if (se) {
    c.shortest_edge = json_int(s["shortest_edge"], "size.shortest_edge", origin);
  } else {
    c.size_height = json_int(s["height"], "size.height", origin);
    c.size_width = json_int(s["width"], "size.width", origin);
  }
}

void read_crop_size(const json& s, const std::string& origin, ImageProcessorConfig& c) {
  if (s.is_number()) {
    c.crop_height = c.crop_width = json_int(s, "crop_size", origin);
    return;
  }
  if (!s.is_object() || !s.contains("height") || !s.contains("width"))
    throw FormatError(origin + ": \"crop_size\" must be an int or {\"height\", \"width\"}, got " +
                      io::json_excerpt(s));
  c.crop_height = json_int(s["height"], "crop_size.height", origin);
  c.crop_width = json_int(s["width"], "crop_size.width", origin);
}

std::vector<Resolution> read_pinpoints(const json& v, const std::string& origin) {
  if (!v.is_array() || v.empty())
    throw FormatError(origin + ": \"image_grid_pinpoints\" must be a non-empty list of " +
                      "[height, width] pairs, got " + io::json_excerpt(v));
  if (v.size() > 1024)
    throw FormatError(origin + ": \"image_grid_pinpoints\" has " + std::to_string(v.size()) +
                      " entries (at most 1024)");
  std::vector<Resolution> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string key = "image_grid_pinpoints[" + std::to_string(i) + "]";
    if (!v[i].is_array() || v[i].size() != 2)
      throw FormatError(origin + ": \"" + key + "\" must be [height, width], got " +
                        io::json_excerpt(v[i]));
    out.push_back({json_int(v[i][0], key, origin), json_int(v[i][1], key, origin)});
  }
  return out;
}

// The anyres base crop's side: get_image_patches resizes the image to (s, s).
int64_t base_side(const ImageProcessorConfig& c) {
  return c.size_height > 0 ? std::min(c.size_height, c.size_width) : c.shortest_edge;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// What is wrong with a configuration, or "".
std::string config_problem(const ImageProcessorConfig& c) {
  auto side = [](const char* what, int64_t v) {
    return v >= 1 && v <= kMaxConfigSide ? std::string()
                                         : std::string(what) + " " + std::to_string(v) +
                                               " is not in 1.." + std::to_string(kMaxConfigSide);
  };
  std::string p;
  if (c.size_height != 0 || c.size_width != 0) {
    if (p = side("size.height", c.size_height); !p.empty()) return p;
    if (p = side("size.width", c.size_width); !p.empty()) return p;
  } else if (p = side("size.shortest_edge", c.shortest_edge); !p.empty()) {
    return p;
  }
  if (p = side("crop_size.height", c.crop_height); !p.empty()) return p;
  if (p = side("crop_size.width", c.crop_width); !p.empty()) return p;
  for (double s : c.image_std)
    if (s == 0.0 || !std::isfinite(s)) return "image_std has a zero or non-finite entry";
  for (double m : c.image_mean)
    if (!std::isfinite(m)) return "image_mean has a non-finite entry";
  if (!std::isfinite(c.rescale_factor)) return "rescale_factor is not finite";
  if (!c.grid_pinpoints.empty() && c.size_height != c.size_width)
    return "size " + std::to_string(c.size_height) + "x" + std::to_string(c.size_width) +
           " (height x width) is not square, which anyres does not support";
  const int64_t tile = c.crop_height;
  for (const Resolution& r : c.grid_pinpoints) {
    const std::string rs = std::to_string(r.height) + "x" + std::to_string(r.width);
    if (r.height < 1 || r.width < 1 || r.height > kMaxPinpointSide || r.width > kMaxPinpointSide)
      return "grid pinpoint " + rs + " must have sides in 1.." + std::to_string(kMaxPinpointSide);
    if (1 + ceil_div(r.height, tile) * ceil_div(r.width, tile) > kMaxCrops)
      return "grid pinpoint " + rs + " makes more than " + std::to_string(kMaxCrops) +
             " crops of " + std::to_string(tile);
  }
  return {};
}

}  // namespace

ImageProcessorConfig ImageProcessorConfig::from_json(std::string_view text,
                                                     const std::string& origin, bool anyres) {
  const json j = io::parse_json_object(text, origin);
  ImageProcessorConfig c;
  auto has = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  if (has("size")) read_size(j["size"], origin, c);
  if (has("crop_size")) read_crop_size(j["crop_size"], origin, c);
  if (anyres)
    c.grid_pinpoints =
        has("image_grid_pinpoints")
            ? read_pinpoints(j["image_grid_pinpoints"], origin)
            : std::vector<Resolution>{{336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}};
  if (has("image_mean")) c.image_mean = json_triple(j["image_mean"], "image_mean", origin);
  if (has("image_std")) c.image_std = json_triple(j["image_std"], "image_std", origin);
  if (has("rescale_factor"))
    c.rescale_factor = json_number(j["rescale_factor"], "rescale_factor", origin);
  auto flag = [&](const char* key, bool& out) {
    if (!has(key)) return;
    if (!j[key].is_boolean()) throw FormatError(origin + ": \"" + key + "\" must be true or false");
    out = j[key].get<bool>();
  };
  flag("do_resize", c.do_resize);
  flag("do_center_crop", c.do_center_crop);
  flag("do_rescale", c.do_rescale);
  flag("do_normalize", c.do_normalize);
  if (has("resample")) {
    int64_t r = json_int(j["resample"], "resample", origin);
    if (r == 3)
      c.resample = ResizeFilter::kBicubic;
    else if (r == 2)
      c.resample = ResizeFilter::kBilinear;
    else
      throw Unimplemented(origin + ": resample filter " + std::to_string(r) +
                          " is not supported (2 = bilinear and 3 = bicubic are)");
  }
  if (anyres && c.size_height != c.size_width)
    throw Unimplemented(origin + ": a non-square \"size\" (height " +
                        std::to_string(c.size_height) + ", width " + std::to_string(c.size_width) +
                        ") is not supported with anyres: transformers versions differ on the " +
                        "base crop's size then");
  if (std::string p = config_problem(c); !p.empty()) throw FormatError(origin + ": " + p);
  return c;
}

ImageProcessorConfig ImageProcessorConfig::load(const std::string& path, bool anyres) {
  return from_json(io::read_text_file(path), path, anyres);
}

namespace {

// ---------------------------------------------------------------- views

// A height x width window whose pixel (y, x) is img's pixel (y0 + y, x0 + x) when that lies in
// the visible rectangle [vy0, vy1) x [vx0, vx1) of img, and 0 otherwise.
struct View {
  const Image* img = nullptr;
  int64_t y0 = 0, x0 = 0, height = 0, width = 0;
  int64_t vy0 = 0, vy1 = 0, vx0 = 0, vx1 = 0;
};

View whole(const Image& im) {
  return {&im, 0, 0, im.height(), im.width(), 0, im.height(), 0, im.width()};
}

// The window (top, left, h, w) of v (top and left may be negative): what lies outside v is 0.
View sub(const View& v, int64_t top, int64_t left, int64_t h, int64_t w) {
  View s = v;
  s.y0 = v.y0 + top, s.x0 = v.x0 + left, s.height = h, s.width = w;
  s.vy0 = std::max(v.vy0, v.y0), s.vy1 = std::min(v.vy1, v.y0 + v.height);
  s.vx0 = std::max(v.vx0, v.x0), s.vx1 = std::min(v.vx1, v.x0 + v.width);
  return s;
}

bool is_whole(const View& v) {
  return v.y0 == 0 && v.x0 == 0 && v.height == v.img->height() && v.width == v.img->width() &&
         v.vy0 == 0 && v.vx0 == 0 && v.vy1 == v.height && v.vx1 == v.width;
}

// Columns [xa, xb) of v that are visible on every visible row.
void visible_cols(const View& v, int64_t& xa, int64_t& xb) {
  xa = std::clamp<int64_t>(v.vx0 - v.x0, 0, v.width);
  xb = std::clamp<int64_t>(v.vx1 - v.x0, xa, v.width);
}

Image materialise(const View& v, const MediaContext& ctx) {
  Image out(static_cast<int>(v.width), static_cast<int>(v.height), ctx.buffers);
  int64_t xa, xb;
  visible_cols(v, xa, xb);
  for (int64_t y = 0; y < v.height; ++y) {
    uint8_t* d = out.row(static_cast<int>(y));
    const int64_t iy = v.y0 + y;
    if (iy < v.vy0 || iy >= v.vy1 || xa == xb) {
      std::memset(d, 0, out.stride());
      continue;
    }
    std::memset(d, 0, static_cast<size_t>(3 * xa));
    std::memcpy(d + 3 * xa, v.img->row(static_cast<int>(iy)) + 3 * (v.x0 + xa),
                static_cast<size_t>(3 * (xb - xa)));
    std::memset(d + 3 * xb, 0, static_cast<size_t>(3 * (v.width - xb)));
  }
  return out;
}

void check_resize(int64_t h, int64_t w, const char* what) {
  if (h < 1 || w < 1 || h > kMaxResizePixels / w)
    throw InvalidArgument("llava::preprocess_image: the " + std::string(what) + " would be " +
                          std::to_string(h) + "x" + std::to_string(w) +
                          " (height x width), over the " + std::to_string(kMaxResizePixels) +
                          " pixels allowed (the image's aspect ratio is too extreme)");
}

// PIL resize of a view (a copy when the size is unchanged, as PIL does).
Image resize_view(const View& v, int64_t h, int64_t w, const ImageProcessorConfig& cfg,
                  const MediaContext& ctx) {
  check_resize(h, w, "resized image");
  if (is_whole(v))
    return media::resize(*v.img, static_cast<int>(w), static_cast<int>(h), cfg.resample, ctx);
  return media::resize(materialise(v, ctx), static_cast<int>(w), static_cast<int>(h), cfg.resample,
                       ctx);
}

// ---------------------------------------------------------------- the CLIP steps

// get_resize_output_image_size: the shortest edge to shortest_edge, the long one
// int(shortest_edge * long / short); or exactly size {height, width}.
Resolution clip_resize_target(int64_t h, int64_t w, const ImageProcessorConfig& c) {
  if (c.size_height > 0) return {c.size_height, c.size_width};
  const int64_t s = c.shortest_edge;
  const int64_t shrt = std::min(h, w), lng = std::max(h, w);
  const auto nl = static_cast<int64_t>(static_cast<double>(s * lng) / static_cast<double>(shrt));
  return w <= h ? Resolution{nl, s} : Resolution{s, nl};
}

// The size a crop of h x w comes out of the CLIP steps with.
Resolution clip_output_size(int64_t h, int64_t w, const ImageProcessorConfig& c) {
  if (c.do_center_crop) return {c.crop_height, c.crop_width};
  return c.do_resize ? clip_resize_target(h, w, c) : Resolution{h, w};
}

using Lut = media::NormalizeLut;

Lut make_lut(const ImageProcessorConfig& cfg) {
  return media::normalize_lut(cfg.image_mean, cfg.image_std, cfg.rescale_factor, cfg.do_rescale,
                              cfg.do_normalize);
}

// Rescale + normalise of a view into [3, height, width] floats.
void normalise(const View& v, const Lut& lut, float* out) {
  const int64_t H = v.height, W = v.width, plane = H * W;
  int64_t xa, xb;
  visible_cols(v, xa, xb);
  for (int64_t y = 0; y < H; ++y) {
    const int64_t iy = v.y0 + y;
    const bool visible = iy >= v.vy0 && iy < v.vy1;
    const uint8_t* src = visible ? v.img->row(static_cast<int>(iy)) + 3 * (v.x0 + xa) : nullptr;
    for (int c = 0; c < 3; ++c) {
      const float* t = lut.v[c];
      float* d = out + c * plane + y * W;
      if (!visible) {
        std::fill(d, d + W, t[0]);
        continue;
      }
      std::fill(d, d + xa, t[0]);
      for (int64_t x = 0; x < xb - xa; ++x) d[xa + x] = t[src[3 * x + c]];
      std::fill(d + xb, d + W, t[0]);
    }
  }
}

// One crop through resize (shortest edge), centre crop, rescale and normalise.
void clip_steps(const View& crop, const ImageProcessorConfig& cfg, const Lut& lut, float* out,
                const MediaContext& ctx) {
  View v = crop;
  Image resized;  // owns what v points to after a resize
  if (cfg.do_resize) {
    const Resolution t = clip_resize_target(v.height, v.width, cfg);
    if (t.height != v.height || t.width != v.width) {
      resized = resize_view(v, t.height, t.width, cfg, ctx);
      v = whole(resized);
    }
  }
  if (cfg.do_center_crop) {
    // center_crop: top = (h - ch) // 2, zero where the image is smaller than the crop.
    auto fdiv2 = [](int64_t a) { return a >= 0 ? a / 2 : -((-a + 1) / 2); };
    v = sub(v, fdiv2(v.height - cfg.crop_height), fdiv2(v.width - cfg.crop_width), cfg.crop_height,
            cfg.crop_width);
  }
  normalise(v, lut, out);
}

}  // namespace

ImageInputs preprocess_image(const Image& rgb, const ImageProcessorConfig& cfg,
                             const MediaContext& ctx) {
  if (rgb.empty())
    throw InvalidArgument("llava::preprocess_image: the image is empty (" +
                          std::to_string(rgb.width()) + "x" + std::to_string(rgb.height()) + ")");
  if (std::string p = config_problem(cfg); !p.empty())
    throw InvalidArgument("llava::preprocess_image: invalid configuration: " + p);
  Stopwatch sw;
  ImageInputs r;
  const int64_t H = rgb.height(), W = rgb.width();
  r.original = {H, W};

  // The crops, as views onto the original or onto the images resized from it.
  std::vector<View> crops;
  Image base, fitted;
  if (cfg.grid_pinpoints.empty()) {
    crops.push_back(whole(rgb));
  } else {
    r.best = select_best_resolution(r.original, cfg.grid_pinpoints);
    r.fitted = patch_output_size(r.original, r.best);
    const int64_t s = base_side(cfg);
    check_resize(s, s, "base crop");
    check_resize(r.fitted.height, r.fitted.width, "fitted image");
    base = media::resize(rgb, static_cast<int>(s), static_cast<int>(s), cfg.resample, ctx);
    crops.push_back(whole(base));
    const bool same = r.fitted.height == H && r.fitted.width == W;
    if (!same)
      fitted = media::resize(rgb, static_cast<int>(r.fitted.width),
                             static_cast<int>(r.fitted.height), cfg.resample, ctx);
    // _pad_for_patching: divmod(target - new, 2), the odd pixel at the bottom / right.
    const int64_t pad_top = (r.best.height - r.fitted.height) / 2;
    const int64_t pad_left = (r.best.width - r.fitted.width) / 2;
    const View padded =
        sub(whole(same ? rgb : fitted), -pad_top, -pad_left, r.best.height, r.best.width);
    // divide_to_patches: crop_height squares row by row; the last row / column may be partial.
    const int64_t T = cfg.crop_height;
    for (int64_t y = 0; y < r.best.height; y += T)
      for (int64_t x = 0; x < r.best.width; x += T)
        crops.push_back(
            sub(padded, y, x, std::min(T, r.best.height - y), std::min(T, r.best.width - x)));
  }
  const auto n = static_cast<int64_t>(crops.size());
  if (n > kMaxCrops)
    throw InvalidArgument("llava::preprocess_image: " + std::to_string(n) +
                          " crops are more than the " + std::to_string(kMaxCrops) + " allowed");

  // Every crop must come out the same size to stack (true with do_center_crop).
  const Resolution out = clip_output_size(crops[0].height, crops[0].width, cfg);
  for (const View& v : crops) {
    const Resolution o = clip_output_size(v.height, v.width, cfg);
    if (o != out)
      throw InvalidArgument("llava::preprocess_image: crops come out " +
                            std::to_string(out.height) + "x" + std::to_string(out.width) + " and " +
                            std::to_string(o.height) + "x" + std::to_string(o.width) +
                            " and cannot be stacked (set do_center_crop)");
    check_resize(o.height, o.width, "crop");
  }
  const int64_t per_crop = 3 * out.height * out.width;
  if (n * per_crop * 4 > kMaxOutputBytes)
    throw InvalidArgument("llava::preprocess_image: pixel_values would take " +
                          std::to_string(n * per_crop * 4) + " bytes, over the " +
                          std::to_string(kMaxOutputBytes) + " allowed");
  std::shared_ptr<uint8_t> mem =
      media::features_buffer(ctx, static_cast<size_t>(n * per_crop) * sizeof(float));
  r.pixel_values = Tensor::view(mem.get(), DType::kF32, {n, 3, out.height, out.width}, mem);
  float* dst = r.pixel_values.data<float>();
  const Lut lut = make_lut(cfg);
  // One crop alone keeps the pool for its resize; several split over the pool (a nested
  // parallel_for inside a crop runs serially).
  if (ctx.pool && ctx.pool->size() > 1 && n > 1)
    ctx.pool->parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        clip_steps(crops[static_cast<size_t>(i)], cfg, lut, dst + i * per_crop, ctx);
    });
  else
    for (int64_t i = 0; i < n; ++i)
      clip_steps(crops[static_cast<size_t>(i)], cfg, lut, dst + i * per_crop, ctx);
  r.preprocess_ms = sw.millis();
  return r;
}

ImageInputs preprocess_image(std::span<const uint8_t> file_bytes, const ImageProcessorConfig& cfg,
                             const PreprocessOptions& opts) {
  if (std::string p = config_problem(cfg); !p.empty())
    throw InvalidArgument("llava::preprocess_image: invalid configuration: " + p);
  Stopwatch sw;
  const media::DecodeOptions dopt{.max_pixels = opts.max_source_pixels,
                                  .buffers = opts.ctx.buffers};
  const Image rgb = media::decode_image(file_bytes, dopt);
  const double decode_ms = sw.millis();
  ImageInputs r = preprocess_image(rgb, cfg, opts.ctx);
  r.decode_ms = decode_ms;
  return r;
}

}  // namespace mmrt::models::llava
