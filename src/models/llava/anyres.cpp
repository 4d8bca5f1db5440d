// LLaVA-NeXT anyres geometry. Every formula follows the Python it mirrors operation by operation
// (true division in double, int() truncation, math.ceil, floor division) so that the chosen grid
// and the token counts agree with transformers to the last integer.
#include "models/llava/anyres.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "core/error.h"
#include "models/llava/image_processor.h"

namespace mmrt::models::llava {

namespace {

// Larger sides are refused so that every product below stays far inside int64 (2^31 * 2^31).
constexpr int64_t kMaxSide = std::numeric_limits<int32_t>::max();

std::string str(Resolution r) {
  return std::to_string(r.height) + "x" + std::to_string(r.width) + " (height x width)";
}

void check_size(Resolution r, const char* what, const char* fn) {
  if (r.height < 1 || r.width < 1 || r.height > kMaxSide || r.width > kMaxSide)
    throw InvalidArgument(std::string(fn) + ": " + what + " " + str(r) + " must have sides in 1.." +
                          std::to_string(kMaxSide));
}

// Python's a // b for b > 0.
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

}  // namespace

Resolution select_best_resolution(Resolution original, std::span<const Resolution> pinpoints) {
  check_size(original, "image size", "select_best_resolution");
  if (pinpoints.empty())
    throw InvalidArgument("select_best_resolution: the list of grid pinpoints is empty");
  const double oh = static_cast<double>(original.height), ow = static_cast<double>(original.width);
  const int64_t area = original.height * original.width;
  Resolution best;
  int64_t best_eff = 0;
  // Stands for float("inf"): no waste reaches it, so the first pinpoint always becomes the best.
  int64_t best_waste = std::numeric_limits<int64_t>::max();
  for (const Resolution& p : pinpoints) {
    check_size(p, "grid pinpoint", "select_best_resolution");
    const double s =
        std::min(static_cast<double>(p.width) / ow, static_cast<double>(p.height) / oh);
    const auto dw = static_cast<int64_t>(ow * s), dh = static_cast<int64_t>(oh * s);
    const int64_t eff = std::min(dw * dh, area);
    const int64_t waste = p.height * p.width - eff;
    if (eff > best_eff || (eff == best_eff && waste < best_waste)) {
      best_eff = eff;
      best_waste = waste;
      best = p;
    }
  }
  return best;
}

Resolution patch_output_size(Resolution original, Resolution target) {
  check_size(original, "image size", "patch_output_size");
  check_size(target, "target size", "patch_output_size");
  const double scale_w = static_cast<double>(target.width) / static_cast<double>(original.width);
  const double scale_h = static_cast<double>(target.height) / static_cast<double>(original.height);
  if (scale_w < scale_h) {
    const auto h = static_cast<int64_t>(std::ceil(static_cast<double>(original.height) * scale_w));
    return {std::min(h, target.height), target.width};
  }
  const auto w = static_cast<int64_t>(std::ceil(static_cast<double>(original.width) * scale_h));
  return {target.height, std::min(w, target.width)};
}

int64_t round7_to_int(double x) {
  if (!(x >= 0) || x > 9e15)
    throw InvalidArgument("round7_to_int: " + std::to_string(x) + " is out of range");
  // printf's %.7f rounds the exact binary value to 7 decimals, half to even under the default
  // rounding mode: the same correctly rounded result as Python's round(x, 7). int() then drops
  // the fraction.
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.7f", x);
  return std::strtoll(buf, nullptr, 10);
}

ImageLayout image_layout(Resolution original, const LayoutParams& p) {
  check_size(original, "image size", "image_layout");
  if (p.crop < 1 || p.patch < 1 || p.patch > p.crop || p.crop > 16384)
    throw InvalidArgument("image_layout: crop " + std::to_string(p.crop) + " and patch " +
                          std::to_string(p.patch) + " must satisfy 1 <= patch <= crop <= 16384");
  ImageLayout l;
  l.original = original;
  l.side = p.crop / p.patch;
  l.base_tokens = l.side * l.side + (p.keep_cls ? 1 : 0);
  l.newline = p.newline;
  if (p.pinpoints.empty()) {  // LLaVA-1.5: the one crop, no grid
    l.n_tokens = l.base_tokens;
    return l;
  }
  for (const Resolution& r : p.pinpoints) {
    check_size(r, "grid pinpoint", "image_layout");
    if (r.height % p.crop != 0 || r.width % p.crop != 0)
      throw InvalidArgument("image_layout: grid pinpoint " + str(r) +
                            " is not a multiple of the crop size " + std::to_string(p.crop));
    if (r.height / p.crop * (r.width / p.crop) + 1 > kMaxCrops)
      throw InvalidArgument("image_layout: grid pinpoint " + str(r) + " makes more than " +
                            std::to_string(kMaxCrops) + " crops of " + std::to_string(p.crop));
  }
  l.best = select_best_resolution(original, p.pinpoints);
  l.tile_rows = l.best.height / p.crop;
  l.tile_cols = l.best.width / p.crop;
  l.n_crops = 1 + l.tile_rows * l.tile_cols;

  // unpad_image on the (tile_rows * side) x (tile_cols * side) feature map.
  const int64_t cur_h = l.tile_rows * l.side, cur_w = l.tile_cols * l.side;
  const double H = static_cast<double>(original.height), W = static_cast<double>(original.width);
  const double original_aspect = W / H;
  const double current_aspect = static_cast<double>(cur_w) / static_cast<double>(cur_h);
  l.rows = cur_h;
  l.cols = cur_w;
  if (original_aspect > current_aspect) {
    const int64_t new_h = round7_to_int(H * (static_cast<double>(cur_w) / W));
    const int64_t pad = floor_div(cur_h - new_h, 2);
    l.top = pad;
    l.rows = cur_h - 2 * pad;
  } else {
    const int64_t new_w = round7_to_int(W * (static_cast<double>(cur_h) / H));
    const int64_t pad = floor_div(cur_w - new_w, 2);
    l.left = pad;
    l.cols = cur_w - 2 * pad;
  }
  l.n_tokens = l.base_tokens + l.rows * (l.cols + (l.newline ? 1 : 0));
  return l;
}

}  // namespace mmrt::models::llava
