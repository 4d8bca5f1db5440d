// What admission expects media preprocessing (decoding, resizing, normalising; in the sandbox,
// the round trip too) to take: a fixed cost per item plus a cost per source pixel, learned from
// what the media workers measure. Each term is fitted only from the items that measure it, and
// bounded: an item of fewer than kSmallItemPixels pixels is mostly fixed cost and moves only the
// per-item term (at most kMaxItemNs); a larger one moves only the per-pixel term (within
// [kMinNsPerPixel, kMaxNsPerPixel]). So no mix of requests can price another's image absurdly:
// a run of 1x1 images cannot raise the per-pixel rate (a single rate learned from them priced a
// 1000x1000 image at 89 s on an idle server).
#pragma once

#include <cstdint>
#include <mutex>

namespace mmrt::engine {

class MediaCostModel {
 public:
  static constexpr int64_t kSmallItemPixels = 64 * 1024;
  static constexpr double kMaxItemNs = 250e6;  // a sandbox worker's start is within this
  static constexpr double kMinNsPerPixel = 0.5, kMaxNsPerPixel = 2000;

  // One preprocessing call: `items` media items of `pixels` source pixels in all took `ns`.
  // Thread-safe (media workers write, the step loop and prepare read).
  void observe(int64_t items, int64_t pixels, double ns);
  double predict_ns(int64_t items, int64_t pixels) const;
  double ns_per_item() const;
  double ns_per_pixel() const;

 private:
  mutable std::mutex mu_;
  double item_ns_ = 2e6;  // prior: 2 ms per item
  double pixel_ns_ = 20;  // prior: 20 ns per pixel (a 1000x1000 JPEG in 20 ms)
};

}  // namespace mmrt::engine
