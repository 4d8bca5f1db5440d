// Qwen2-VL image preprocessing: config loading, smart_resize, the media module's streaming decode
// + resize, and the fused rescale/normalise/patchify. Values are computed as numpy does: float32(v
// * factor) in double, then (x - mean) / std in float32 with float32 copies of mean and std.
#include "models/qwen2_vl/image_processor.h"

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
#include "media/pipeline.h"

namespace mmrt::models::qwen2_vl {

using namespace mmrt::media;

namespace {

using json = nlohmann::json;

std::string fmt_double(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

constexpr auto& json_int = io::json_int_value;
constexpr auto& json_number = io::json_number_value;
constexpr auto& json_triple = io::json_rgb_value;

}  // namespace

ImageProcessorConfig ImageProcessorConfig::from_json(std::string_view text,
                                                     const std::string& origin) {
  const json j = io::parse_json_object(text, origin);
  ImageProcessorConfig c;
  auto has = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  if (has("size")) {
    const json& s = j["size"];
    if (!s.is_object() || !s.contains("shortest_edge") || !s.contains("longest_edge"))
      throw FormatError(origin + ": \"size\" must contain \"shortest_edge\" and \"longest_edge\"");
    c.min_pixels = json_int(s["shortest_edge"], "size.shortest_edge", origin);
    c.max_pixels = json_int(s["longest_edge"], "size.longest_edge", origin);
  }
  if (has("min_pixels")) c.min_pixels = json_int(j["min_pixels"], "min_pixels", origin);
  if (has("max_pixels")) c.max_pixels = json_int(j["max_pixels"], "max_pixels", origin);
  auto positive = [&](const char* key, int& out) {
    if (!has(key)) return;
    int64_t v = json_int(j[key], key, origin);
    if (v < 1 || v > 1024)
      throw FormatError(origin + ": \"" + key + "\" out of range: " + std::to_string(v));
    out = static_cast<int>(v);
  };
  positive("patch_size", c.patch_size);
  positive("temporal_patch_size", c.temporal_patch_size);
  positive("merge_size", c.merge_size);
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
  // The resized image holds up to max_pixels (x 3 channels x 4 bytes of features): bound it by
  // what any Qwen2-VL checkpoint uses (12.8 Mpixel at most) with room to spare.
  constexpr int64_t kMaxPixels = int64_t{1} << 26;
  for (const auto& [key, v] : {std::pair{"min_pixels", c.min_pixels}, {"max_pixels", c.max_pixels}})
    if (v < 1 || v > kMaxPixels)
      throw FormatError(origin + ": \"" + key + "\" must be in 1.." + std::to_string(kMaxPixels) +
                        ", got " + std::to_string(v));
  if (c.min_pixels > c.max_pixels)
    throw FormatError(origin + ": min_pixels " + std::to_string(c.min_pixels) +
                      " is larger than max_pixels " + std::to_string(c.max_pixels));
  for (double s : c.image_std)
    if (s == 0.0) throw FormatError(origin + ": image_std has a zero entry");
  return c;
}

ImageProcessorConfig ImageProcessorConfig::load(const std::string& path) {
  return from_json(io::read_text_file(path), path);
}

ResizedSize smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                         int64_t max_pixels) {
  if (height < 1 || width < 1)
    throw InvalidArgument("smart_resize: image size " + std::to_string(height) + "x" +
                          std::to_string(width) + " is not positive");
  const double ratio =
      static_cast<double>(std::max(height, width)) / static_cast<double>(std::min(height, width));
  if (ratio > 200)
    throw InvalidArgument("the image is " + std::to_string(width) + "x" + std::to_string(height) +
                          " (width x height): its aspect ratio " + fmt_double(ratio) +
                          " is over the 200 the model accepts");
  const double f = static_cast<double>(factor);
  const double h = static_cast<double>(height), w = static_cast<double>(width);
  int64_t hb = static_cast<int64_t>(std::nearbyint(h / f)) * factor;  // round-half-even
  int64_t wb = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  if (hb * wb > max_pixels) {
    const double beta = std::sqrt(h * w / static_cast<double>(max_pixels));
    hb = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    wb = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (hb * wb < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    hb = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    wb = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return {hb, wb};
}

Tensor ImageInputs::grid_thw() const {
  Tensor g = Tensor::empty(DType::kI64, {1, 3});
  int64_t* d = g.data<int64_t>();
  d[0] = grid_t, d[1] = grid_h, d[2] = grid_w;
  return g;
}

void patchify_slice(std::span<const Image* const> frames, const ImageProcessorConfig& cfg, float* o,
                    const MediaContext& ctx) {
  const int p = cfg.patch_size, T = cfg.temporal_patch_size, m = cfg.merge_size;
  if (frames.empty() || static_cast<int>(frames.size()) > T)
    throw InvalidArgument("qwen2_vl::patchify: a slice takes 1 to " + std::to_string(T) +
                          " frames, got " + std::to_string(frames.size()));
  const Image& img = *frames[0];
  const int H = img.height(), W = img.width(), F = p * m;
  if (H <= 0 || W <= 0 || H % F != 0 || W % F != 0)
    throw InvalidArgument("qwen2_vl::patchify: image " + std::to_string(W) + "x" +
                          std::to_string(H) +
                          " is not a multiple of patch_size * merge_size = " + std::to_string(F));
  for (const Image* f : frames)
    if (f->width() != W || f->height() != H)
      throw InvalidArgument("qwen2_vl::patchify: the frames of a slice differ in size (" +
                            std::to_string(W) + "x" + std::to_string(H) + " and " +
                            std::to_string(f->width()) + "x" + std::to_string(f->height()) + ")");
  const int gw = W / p, nf = static_cast<int>(frames.size());
  const int64_t pp = static_cast<int64_t>(p) * p, D = 3 * T * pp;

  // Every output value is a function of (channel, byte): the fused loop is a lookup.
  const media::NormalizeLut lut = media::normalize_lut(
      cfg.image_mean, cfg.image_std, cfg.rescale_factor, cfg.do_rescale, cfg.do_normalize);

  // One band = one row of merge blocks = F image rows = gw * m output rows. Frame t of the slice
  // fills column block (c * T + t); a slice of fewer than T frames repeats its last one.
  const int bands = H / p / m, blocks_w = gw / m;
  auto run = [&](int64_t b0, int64_t b1) {
    for (int64_t bh = b0; bh < b1; ++bh) {
      for (int bw = 0; bw < blocks_w; ++bw) {
        for (int mh = 0; mh < m; ++mh) {
          for (int mw = 0; mw < m; ++mw) {
            const int64_t r = ((bh * blocks_w + bw) * m + mh) * m + mw;
            float* row = o + r * D;
            const int y0 = static_cast<int>((bh * m + mh) * p), x0 = (bw * m + mw) * p;
            for (int c = 0; c < 3; ++c) {
              const float* t = lut.v[c];
              for (int tt = 0; tt < nf; ++tt) {
                float* dst = row + (static_cast<int64_t>(c) * T + tt) * pp;
                for (int py = 0; py < p; ++py) {
                  const uint8_t* s = frames[static_cast<size_t>(tt)]->row(y0 + py) + 3 * x0 + c;
                  float* d = dst + py * p;
                  for (int px = 0; px < p; ++px) d[px] = t[s[3 * px]];
                }
              }
              float* last = row + (static_cast<int64_t>(c) * T + nf - 1) * pp;
              for (int tt = nf; tt < T; ++tt)
                std::memcpy(row + (static_cast<int64_t>(c) * T + tt) * pp, last,
                            pp * sizeof(float));
            }
          }
        }
      }
    }
  };
  if (ctx.pool && ctx.pool->size() > 1 && static_cast<int64_t>(H) * W >= (1 << 16))
    ctx.pool->parallel_for(bands, 1, run);
  else
    run(0, bands);
}

Tensor patchify(const Image& img, const ImageProcessorConfig& cfg, const MediaContext& ctx) {
  const int p = cfg.patch_size, T = cfg.temporal_patch_size, F = p * cfg.merge_size;
  const int H = img.height(), W = img.width();
  if (H <= 0 || W <= 0 || H % F != 0 || W % F != 0)
    throw InvalidArgument("qwen2_vl::patchify: image " + std::to_string(W) + "x" +
                          std::to_string(H) +
                          " is not a multiple of patch_size * merge_size = " + std::to_string(F));
  const int64_t D = 3 * T * static_cast<int64_t>(p) * p;
  const int64_t n = static_cast<int64_t>(H / p) * (W / p);
  std::shared_ptr<uint8_t> mem = features_buffer(ctx, static_cast<size_t>(n * D) * sizeof(float));
  Tensor out = Tensor::view(mem.get(), DType::kF32, {n, D}, mem);  // [N, 3*T*p*p]
  const Image* frames[] = {&img};
  patchify_slice(frames, cfg, out.data<float>(), ctx);
  return out;
}

namespace {

ImageInputs finish_inputs(const Image& resized, const ImageProcessorConfig& cfg,
                          const MediaContext& ctx, ImageInputs r) {
  Stopwatch sw;
  r.pixel_values = patchify(resized, cfg, ctx);
  r.patchify_ms = sw.millis();
  r.grid_t = 1;
  r.grid_h = resized.height() / cfg.patch_size;
  r.grid_w = resized.width() / cfg.patch_size;
  r.merge_size = cfg.merge_size;
  r.resized_width = resized.width();
  r.resized_height = resized.height();
  return r;
}

ResizedSize target_size(int64_t h, int64_t w, const ImageProcessorConfig& cfg) {
  if (!cfg.do_resize) return {h, w};
  return smart_resize(h, w, cfg.factor(), cfg.min_pixels, cfg.max_pixels);
}

}  // namespace

ImageInputs preprocess_image(std::span<const uint8_t> file_bytes, const ImageProcessorConfig& cfg,
                             const PreprocessOptions& opts) {
  if (opts.target_width > 0 || opts.target_height > 0) {
    const int f = cfg.factor();
    if (opts.target_width <= 0 || opts.target_height <= 0 || opts.target_width % f ||
        opts.target_height % f)
      throw InvalidArgument("qwen2_vl::preprocess_image: target size " +
                            std::to_string(opts.target_width) + "x" +
                            std::to_string(opts.target_height) + " must be positive multiples of " +
                            std::to_string(f));
  }
  auto target = [&](int w, int h) {
    if (opts.target_width > 0) return Size2{opts.target_width, opts.target_height};
    const ResizedSize rs = target_size(h, w, cfg);
    return Size2{static_cast<int>(rs.width), static_cast<int>(rs.height)};
  };
  const DecodeOptions dopt{.max_pixels = opts.max_source_pixels, .mode = opts.mode};
  DecodedResized d = decode_resized(file_bytes, target, cfg.resample, dopt, opts.ctx);
  ImageInputs r;
  r.source_width = d.source.width;
  r.source_height = d.source.height;
  r.decoded_width = d.decoded_width;
  r.decoded_height = d.decoded_height;
  r.jpeg_scale_denom = d.jpeg_scale_denom;
  r.decode_ms = d.decode_ms;
  r.resize_ms = d.resize_ms;
  return finish_inputs(d.image, cfg, opts.ctx, std::move(r));
}

ImageInputs preprocess_image(const Image& rgb, const ImageProcessorConfig& cfg,
                             const MediaContext& ctx) {
  if (rgb.empty()) throw InvalidArgument("qwen2_vl::preprocess_image: empty image");
  ResizedSize rs = target_size(rgb.height(), rgb.width(), cfg);
  Stopwatch sw;
  Image resized =
      resize(rgb, static_cast<int>(rs.width), static_cast<int>(rs.height), cfg.resample, ctx);
  ImageInputs r;
  r.source_width = r.decoded_width = rgb.width();
  r.source_height = r.decoded_height = rgb.height();
  r.resize_ms = sw.millis();
  return finish_inputs(resized, cfg, ctx, std::move(r));
}

}  // namespace mmrt::models::qwen2_vl
