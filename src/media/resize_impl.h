// Internal pieces of the PIL-exact resizer shared by resize.cpp, the per-ISA kernel files and
// the streaming preprocessing pipeline. Not part of the public API.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "media/image.h"
#include "media/resize.h"

namespace mmrt {
class ThreadPool;
}

namespace mmrt::media::detail {

// One axis of PIL's precompute_coeffs + normalize_coeffs_8bpc: output i reads inputs
// [first[i], first[i] + count[i]) with fixed-point weights k[i * ksize + j].
struct AxisPlan {
  int in_size = 0, out_size = 0, ksize = 0;
  std::vector<int32_t> first, count;
  std::vector<int32_t> k;  // [out_size * ksize], zero past count[i]
};
AxisPlan plan_axis(int in_size, int out_size, ResizeFilter filter);

// The horizontal pass laid out for the vector kernels: outputs padded to a multiple of 4, every
// output reads exactly `taps` (a multiple of 4) pixels from `start[i]` (moved left near the right
// edge so no read goes past input pixel max(in_size, taps) + 1), and each weight is repeated 4
// times (one per R, G, B, pad lane): kexp[(i * taps + j) * 4 + c].
struct HorizontalPlan {
  AxisPlan axis;
  int taps = 0, out_padded = 0;
  std::vector<int32_t> start;
  std::vector<int32_t> kexp;
};
HorizontalPlan plan_horizontal(int in_size, int out_size, ResizeFilter filter);

// Kernels. Rows are packed RGB. horizontal() reads up to 3 * (in_size + 4) + 16 bytes of `src`
// (callers keep that much readable) and writes exactly 3 * out_size bytes. vertical() computes
// one output row of `nbytes` bytes from n source rows.
struct ResizeKernels {
  const char* name;
  void (*horizontal)(const uint8_t* src, uint8_t* dst, const HorizontalPlan& p);
  void (*vertical)(const uint8_t* const* rows, const int32_t* k, int n, uint8_t* dst, int nbytes);
};
// The variant resize() uses at most `cap`.
const ResizeKernels& resize_kernels(Isa cap);
const ResizeKernels& scalar_resize_kernels();
const ResizeKernels& avx2_resize_kernels();    // resize_avx2.cpp
const ResizeKernels& avx512_resize_kernels();  // resize_avx512.cpp

// Streaming resize: feed the source rows top to bottom (rows outside the vertical filter's reach
// are skipped), then finish() runs the vertical pass. Produces exactly resize()'s result.
class StreamingResizer {
 public:
  StreamingResizer(int in_w, int in_h, int out_w, int out_h, ResizeFilter filter,
                   const MediaContext& ctx);
  int in_width() const { return in_w_; }
  // A scratch buffer for source row y, valid until the next kMaxRowsInFlight calls.
  uint8_t* row_buffer(int y);
  void push_row(int y);  // row y (written into row_buffer(y)) is complete
  Image finish();

 private:
  int in_w_, out_w_, out_h_;
  bool need_h_, need_v_;
  int y_first_ = 0, y_last_ = 0;  // source rows the vertical pass reads
  AxisPlan vert_;
  HorizontalPlan horiz_;
  Image tmp_;                      // horizontally resized rows (or the source rows)
  std::shared_ptr<uint8_t> ring_;  // source rows before the horizontal pass
  size_t ring_stride_ = 0;
  MediaContext ctx_;
  const ResizeKernels* kern_;
};

// Vertical pass from `src` rows (bounds already relative to src) into `dst`, rows split on pool.
void vertical_pass(const Image& src, const AxisPlan& vert, Image& dst, const MediaContext& ctx);

}  // namespace mmrt::media::detail
