// PIL-exact resize: coefficient planning (Resample.c's precompute_coeffs and
// normalize_coeffs_8bpc, same double arithmetic in the same order), the portable kernels, the
// run-time kernel choice and the two-pass drivers (whole image, and streaming for decoders).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/thread_pool.h"
#include "media/decode_internal.h"
#include "media/resize.h"
#include "media/resize_impl.h"

namespace mmrt::media {

std::string_view filter_name(ResizeFilter f) {
  return f == ResizeFilter::kBicubic ? "bicubic" : "bilinear";
}

namespace detail {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double bilinear(double x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return 1.0 - x;
  return 0.0;
}

inline uint8_t clip8(int32_t acc) {
  int32_t v = acc >> kPrecisionBits;  // arithmetic shift (floor), as PIL
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

void horizontal_scalar(const uint8_t* src, uint8_t* dst, const HorizontalPlan& p) {
  const AxisPlan& a = p.axis;
  for (int i = 0; i < a.out_size; ++i) {
    const uint8_t* s = src + 3 * static_cast<size_t>(a.first[i]);
    const int32_t* k = &a.k[static_cast<size_t>(i) * a.ksize];
    int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
    for (int j = 0; j < a.count[i]; ++j) {
      s0 += s[3 * j] * k[j];
      s1 += s[3 * j + 1] * k[j];
      s2 += s[3 * j + 2] * k[j];
    }
    dst[3 * i] = clip8(s0);
    dst[3 * i + 1] = clip8(s1);
    dst[3 * i + 2] = clip8(s2);
  }
}

void vertical_scalar(const uint8_t* const* rows, const int32_t* k, int n, uint8_t* dst,
                     int nbytes) {
  for (int i = 0; i < nbytes; ++i) {
    int32_t acc = 1 << (kPrecisionBits - 1);
    for (int j = 0; j < n; ++j) acc += rows[j][i] * k[j];
    dst[i] = clip8(acc);
  }
}

const ResizeKernels kScalar{"scalar", horizontal_scalar, vertical_scalar};

void check_size(int w, int h, const char* what) {
  if (w <= 0 || h <= 0)
    throw InvalidArgument(std::string("resize: ") + what + " size " + std::to_string(w) + "x" +
                          std::to_string(h) + " is not positive");
}

// Splits [0, n) over the pool when the work (n rows of `row_work` bytes) is worth it.
template <typename Fn>
void for_rows(ThreadPool* pool, int n, int64_t row_work, Fn&& fn) {
  constexpr int64_t kMinParallelWork = 1 << 17;
  if (pool && pool->size() > 1 && n > 1 && n * row_work >= kMinParallelWork) {
    int64_t grain = std::max<int64_t>(1, n / (4 * pool->size()));
    pool->parallel_for(n, grain,
                       [&](int64_t b, int64_t e) { fn(static_cast<int>(b), static_cast<int>(e)); });
  } else {
    fn(0, n);
  }
}

}  // namespace

const ResizeKernels& scalar_resize_kernels() {
  return kScalar;
}
const ResizeKernels& resize_kernels(Isa cap) {
  static const IsaVariants<ResizeKernels> v{{Isa::kAvx512, avx512_resize_kernels},
                                            {Isa::kAvx2, avx2_resize_kernels},
                                            {Isa::kPortable, scalar_resize_kernels}};
  return v.at_most(cap);
}

AxisPlan plan_axis(int in_size, int out_size, ResizeFilter filter) {
  check_size(in_size, out_size, "axis");
  double (*kernel)(double) = filter == ResizeFilter::kBicubic ? bicubic : bilinear;
  const double kernel_support = filter == ResizeFilter::kBicubic ? 2.0 : 1.0;
  // PIL passes the box as floats: in0 = 0, in1 = in_size.
  const float in0 = 0.0f, in1 = static_cast<float>(in_size);
  const double scale = static_cast<double>(in1 - in0) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = kernel_support * filterscale;
  AxisPlan p;
  p.in_size = in_size;
  p.out_size = out_size;
  p.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  p.first.resize(out_size);
  p.count.resize(out_size);
  p.k.assign(static_cast<size_t>(out_size) * p.ksize, 0);
  std::vector<double> w(p.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    double ww = 0.0;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    for (int x = 0; x < xmax; ++x) {
      w[x] = kernel((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    int32_t* k = &p.k[static_cast<size_t>(xx) * p.ksize];
    for (int x = 0; x < xmax; ++x) {
      double v = ww != 0.0 ? w[x] / ww : w[x];
      k[x] = v < 0 ? static_cast<int32_t>(-0.5 + v * (1 << kPrecisionBits))
                   : static_cast<int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    p.first[xx] = xmin;
    p.count[xx] = xmax;
  }
  return p;
}

HorizontalPlan plan_horizontal(int in_size, int out_size, ResizeFilter filter) {
  HorizontalPlan h;
  h.axis = plan_axis(in_size, out_size, filter);
  const AxisPlan& a = h.axis;
  int max_count = 1;
  for (int c : a.count) max_count = std::max(max_count, c);
  h.taps = (max_count + 3) / 4 * 4;
  h.out_padded = (out_size + 3) / 4 * 4;
  h.start.assign(h.out_padded, 0);
  h.kexp.assign(static_cast<size_t>(h.out_padded) * h.taps * 4, 0);
  for (int i = 0; i < out_size; ++i) {
    int start = a.first[i];
    if (start + h.taps > in_size) start = std::max(0, in_size - h.taps);
    h.start[i] = start;
    const int off = a.first[i] - start;
    const int32_t* k = &a.k[static_cast<size_t>(i) * a.ksize];
    int32_t* e = &h.kexp[static_cast<size_t>(i) * h.taps * 4];
    for (int j = 0; j < a.count[i]; ++j)
      for (int c = 0; c < 4; ++c) e[(off + j) * 4 + c] = k[j];
  }
  return h;
}

void vertical_pass(const Image& src, const AxisPlan& vert, Image& dst, const MediaContext& ctx) {
  const ResizeKernels& kern = resize_kernels(ctx.isa);
  const int nbytes = static_cast<int>(dst.stride());
  for_rows(ctx.pool, dst.height(), static_cast<int64_t>(nbytes) * vert.ksize, [&](int y0, int y1) {
    std::vector<const uint8_t*> rows(vert.ksize);
    for (int y = y0; y < y1; ++y) {
      const int n = vert.count[y];
      for (int j = 0; j < n; ++j) rows[j] = src.row(vert.first[y] + j);
      kern.vertical(rows.data(), &vert.k[static_cast<size_t>(y) * vert.ksize], n, dst.row(y),
                    nbytes);
    }
  });
}

StreamingResizer::StreamingResizer(int in_w, int in_h, int out_w, int out_h, ResizeFilter filter,
                                   const MediaContext& ctx)
    : in_w_(in_w), out_w_(out_w), out_h_(out_h), ctx_(ctx), kern_(&resize_kernels(ctx.isa)) {
  check_size(in_w, in_h, "source");
  check_size(out_w, out_h, "target");
  need_h_ = out_w != in_w;
  need_v_ = out_h != in_h;
  vert_ = plan_axis(in_h, out_h, filter);
  if (need_h_) {
    y_first_ = vert_.first[0];
    y_last_ = vert_.first[out_h - 1] + vert_.count[out_h - 1];
    for (int& f : vert_.first) f -= y_first_;
    horiz_ = plan_horizontal(in_w, out_w, filter);
    tmp_ = Image(out_w, y_last_ - y_first_, ctx_.buffers);
    ring_stride_ = (static_cast<size_t>(in_w) * 3 + Image::kTailPad + 63) / 64 * 64;
    ring_ = ctx_.buffers.get(ring_stride_ * kMaxRowsInFlight);
    std::memset(ring_.get(), 0, ring_stride_ * kMaxRowsInFlight);
  } else {
    y_first_ = 0;
    y_last_ = in_h;
    tmp_ = Image(in_w, in_h, ctx_.buffers);
  }
}

uint8_t* StreamingResizer::row_buffer(int y) {
  if (!need_h_) return tmp_.row(y);
  return ring_.get() + ring_stride_ * static_cast<size_t>(y % kMaxRowsInFlight);
}

void StreamingResizer::push_row(int y) {
  if (!need_h_ || y < y_first_ || y >= y_last_) return;
  kern_->horizontal(row_buffer(y), tmp_.row(y - y_first_), horiz_);
}

Image StreamingResizer::finish() {
  if (!need_v_) return std::move(tmp_);
  Image out(out_w_, out_h_, ctx_.buffers);
  vertical_pass(tmp_, vert_, out, ctx_);
  return out;
}

}  // namespace detail

Image resize(const Image& src, int width, int height, ResizeFilter filter,
             const MediaContext& ctx) {
  using namespace detail;
  check_size(width, height, "target");
  if (src.empty()) throw InvalidArgument("resize: empty source image");
  if (width == src.width() && height == src.height()) return src;
  AxisPlan vert = plan_axis(src.height(), height, filter);
  if (width == src.width()) {
    Image out(width, height, ctx.buffers);
    vertical_pass(src, vert, out, ctx);
    return out;
  }
  const int y_first = vert.first[0];
  const int y_last = vert.first[height - 1] + vert.count[height - 1];
  HorizontalPlan hp = plan_horizontal(src.width(), width, filter);
  Image tmp(width, y_last - y_first, ctx.buffers);
  const ResizeKernels& kern = resize_kernels(ctx.isa);
  for_rows(ctx.pool, tmp.height(), static_cast<int64_t>(width) * 3 * hp.taps, [&](int r0, int r1) {
    for (int r = r0; r < r1; ++r) kern.horizontal(src.row(y_first + r), tmp.row(r), hp);
  });
  if (height == src.height()) return tmp;
  for (int& f : vert.first) f -= y_first;
  Image out(width, height, ctx.buffers);
  vertical_pass(tmp, vert, out, ctx);
  return out;
}

const char* resize_isa(Isa cap) {
  return detail::resize_kernels(cap).name;
}

}  // namespace mmrt::media
