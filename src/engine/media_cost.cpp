#include "engine/media_cost.h"

#include <algorithm>
#include <cmath>

namespace mmrt::engine {

namespace {
constexpr double kWeight = 0.2;  // of a new measurement in the running estimate
}  // namespace

void MediaCostModel::observe(int64_t items, int64_t pixels, double ns) {
  if (items <= 0 || pixels < 0 || !std::isfinite(ns) || ns < 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  const double n = static_cast<double>(items), px = static_cast<double>(pixels);
  if (pixels < kSmallItemPixels * items) {
    // Mostly fixed cost: what the pixels do not explain, per item.
    const double per_item = std::clamp((ns - pixel_ns_ * px) / n, 0.0, kMaxItemNs);
    item_ns_ += kWeight * (per_item - item_ns_);
  } else {
    // Mostly pixels: what the fixed cost does not explain, per pixel.
    const double per_pixel = std::clamp((ns - item_ns_ * n) / px, kMinNsPerPixel, kMaxNsPerPixel);
    pixel_ns_ += kWeight * (per_pixel - pixel_ns_);
  }
}

double MediaCostModel::predict_ns(int64_t items, int64_t pixels) const {
  std::lock_guard<std::mutex> lk(mu_);
  return item_ns_ * static_cast<double>(std::max<int64_t>(items, 0)) +
         pixel_ns_ * static_cast<double>(std::max<int64_t>(pixels, 0));
}

double MediaCostModel::ns_per_item() const {
  std::lock_guard<std::mutex> lk(mu_);
  return item_ns_;
}

double MediaCostModel::ns_per_pixel() const {
  std::lock_guard<std::mutex> lk(mu_);
  return pixel_ns_;
}

}  // namespace mmrt::engine
