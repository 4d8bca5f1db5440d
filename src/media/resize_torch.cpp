// torchvision-exact resize: aten's antialiased bicubic weights (same float / double arithmetic,
// same fused multiply-adds as the AVX2 build of torch 1.13), the portable kernels, the run-time
// kernel choice and the two-pass driver (horizontal into a float32 intermediate, then vertical
// with clamp + round half to even).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "media/resize_torch.h"
#include "media/resize_torch_impl.h"

namespace mmrt::media {
namespace detail {
namespace {

// HelperInterpCubic::aa_filter<float> as torch's AVX2 build computes it: below 1 in double
// (`#define a -0.5`, the polynomial contracted to two fmas), below 2 in float (two fmas, then
// the float product with a).
float torch_cubic(float x) {
  x = std::fabs(x);
  if (x < 1.0f) {
    const double xd = x;
    return static_cast<float>(std::fma(std::fma(1.5, xd, -2.5) * xd, xd, 1.0));
  }
  if (x < 2.0f) return std::fmaf(std::fmaf(x - 5.0f, x, 8.0f), x, -4.0f) * -0.5f;
  return 0.0f;
}

void check_size(int w, int h, const char* what) {
  if (w <= 0 || h <= 0)
    throw InvalidArgument(std::string("resize_like_torchvision: ") + what + " size " +
                          std::to_string(w) + "x" + std::to_string(h) + " is not positive");
}

size_t scratch_scalar(const TorchAxis&) {
  return 0;
}

// The tap order and rounding of resize_torch_impl.h, for the 3 channels of one output pixel.
// (Several rows at once would hide more add latency, but the libm fmaf calls of the fused taps
// then spill the sums: slower.)
void horizontal_scalar(const uint8_t* src, size_t src_stride, int rows, float* dst,
                       size_t dst_stride, const TorchAxis& a, float*) {
  for (int r = 0; r < rows; ++r) {
    const uint8_t* s = src + src_stride * static_cast<size_t>(r);
    float* d = dst + dst_stride * static_cast<size_t>(r);
    for (int i = 0; i < a.out_size; ++i) {
      const uint8_t* p = s + 3 * static_cast<size_t>(a.first[i]);
      const float* w = &a.w[static_cast<size_t>(i) * a.taps];
      const int n = a.count[i], fused = a.fused[i];
      float o0 = static_cast<float>(p[0]) * w[0];
      float o1 = static_cast<float>(p[1]) * w[0];
      float o2 = static_cast<float>(p[2]) * w[0];
      int j = 1;
      for (; j < fused; ++j) {
        const float p0 = static_cast<float>(p[3 * j]) * w[j];
        const float p1 = static_cast<float>(p[3 * j + 1]) * w[j];
        const float p2 = static_cast<float>(p[3 * j + 2]) * w[j];
        o0 = o0 + p0;
        o1 = o1 + p1;
        o2 = o2 + p2;
      }
      for (; j < n; ++j) {
        o0 = std::fmaf(static_cast<float>(p[3 * j]), w[j], o0);
        o1 = std::fmaf(static_cast<float>(p[3 * j + 1]), w[j], o1);
        o2 = std::fmaf(static_cast<float>(p[3 * j + 2]), w[j], o2);
      }
      d[3 * i] = o0;
      d[3 * i + 1] = o1;
      d[3 * i + 2] = o2;
    }
  }
}

// Row by row over a chunk of values, so that the compiler vectorises the unfused taps (the same
// IEEE operations per value).
void vertical_scalar(const float* const* rows, const float* w, int n, int fused, uint8_t* dst,
                     int nvals) {
  constexpr int kChunk = 256;
  float acc[kChunk];
  for (int k0 = 0; k0 < nvals; k0 += kChunk) {
    const int m = std::min(kChunk, nvals - k0);
    const float* r0 = rows[0] + k0;
    for (int k = 0; k < m; ++k) acc[k] = r0[k] * w[0];
    int j = 1;
    for (; j < fused; ++j) {
      const float* rj = rows[j] + k0;
      const float wj = w[j];
      for (int k = 0; k < m; ++k) {
        const float p = rj[k] * wj;
        acc[k] = acc[k] + p;
      }
    }
    for (; j < n; ++j) {
      const float* rj = rows[j] + k0;
      for (int k = 0; k < m; ++k) acc[k] = std::fmaf(rj[k], w[j], acc[k]);
    }
    // torchvision: clamp(0, 255), torch.round (half to even), then the cast.
    for (int k = 0; k < m; ++k)
      dst[k0 + k] = static_cast<uint8_t>(std::nearbyint(std::min(std::max(acc[k], 0.0f), 255.0f)));
  }
}

const TorchResizeKernels kScalar{"scalar", 1, scratch_scalar, horizontal_scalar, vertical_scalar};

// Splits [0, n) over the pool when the work (n items of `item_work` multiply-adds) is worth it.
template <typename Fn>
void for_items(ThreadPool* pool, int n, int64_t item_work, Fn&& fn) {
  constexpr int64_t kMinParallelWork = 1 << 17;
  if (pool && pool->size() > 1 && n > 1 && n * item_work >= kMinParallelWork) {
    const int64_t grain = std::max<int64_t>(1, n / (4 * pool->size()));
    pool->parallel_for(n, grain,
                       [&](int64_t b, int64_t e) { fn(static_cast<int>(b), static_cast<int>(e)); });
  } else {
    fn(0, n);
  }
}

}  // namespace

const TorchResizeKernels& scalar_torch_resize_kernels() {
  return kScalar;
}

const TorchResizeKernels& torch_resize_kernels(Isa cap) {
  static const IsaVariants<TorchResizeKernels> v{{Isa::kAvx512, avx512_torch_resize_kernels},
                                                 {Isa::kAvx2, avx2_torch_resize_kernels},
                                                 {Isa::kPortable, scalar_torch_resize_kernels}};
  return v.at_most(cap);
}

TorchAxis plan_torch_axis(int in_size, int out_size) {
  check_size(in_size, out_size, "axis");
  // area_pixel_compute_scale<float>: float(in) / out in float. The promotions below are aten's:
  // `center`, `support` and `invscale` are stored as float, the sums around them are double.
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  const float support = scale >= 1.0f ? static_cast<float>(2.0 * scale) : 2.0f;
  const float invscale = scale >= 1.0f ? static_cast<float>(1.0 / scale) : 1.0f;
  TorchAxis a;
  a.in_size = in_size;
  a.out_size = out_size;
  a.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  a.first.resize(out_size);
  a.count.resize(out_size);
  a.fused.resize(out_size);
  a.w.assign(static_cast<size_t>(out_size) * a.taps, 0.0f);
  for (int i = 0; i < out_size; ++i) {
    const float center = static_cast<float>(scale * (i + 0.5));
    const int64_t xmin =
        std::max(static_cast<int64_t>(static_cast<double>(center - support) + 0.5), int64_t{0});
    const int64_t xsize =
        std::min(static_cast<int64_t>(static_cast<double>(center + support) + 0.5),
                 static_cast<int64_t>(in_size)) -
        xmin;
    float* w = &a.w[static_cast<size_t>(i) * a.taps];
    float total = 0.0f;
    for (int64_t j = 0; j < xsize; ++j) {
      const float d = static_cast<float>(j + xmin) - center;
      w[j] = torch_cubic(static_cast<float>((static_cast<double>(d) + 0.5) * invscale));
      total += w[j];
    }
    if (total != 0.0f)
      for (int64_t j = 0; j < xsize; ++j) w[j] /= total;
    a.first[i] = static_cast<int32_t>(xmin);
    a.count[i] = static_cast<int32_t>(xsize);
    a.fused[i] = torch_fused_from(static_cast<int>(xsize));
  }
  return a;
}

TorchAxis identity_torch_axis(int n) {
  check_size(n, n, "axis");
  TorchAxis a;
  a.in_size = a.out_size = n;
  a.taps = 1;
  a.first.resize(n);
  for (int i = 0; i < n; ++i) a.first[i] = i;
  a.count.assign(n, 1);
  a.fused.assign(n, 1);
  a.w.assign(n, 1.0f);
  return a;
}

}  // namespace detail

Image resize_like_torchvision(const Image& src, int width, int height, const MediaContext& ctx) {
  using namespace detail;
  check_size(width, height, "target");
  if (src.empty()) throw InvalidArgument("resize_like_torchvision: empty source image");
  if (width == src.width() && height == src.height()) return src;
  const TorchResizeKernels& kern = torch_resize_kernels(ctx.isa);
  // An unchanged axis is skipped by aten; a single weight 1.0 passes it through exactly.
  const TorchAxis hor =
      width != src.width() ? plan_torch_axis(src.width(), width) : identity_torch_axis(width);
  const TorchAxis ver =
      height != src.height() ? plan_torch_axis(src.height(), height) : identity_torch_axis(height);

  // Horizontal pass over the source rows the vertical filter reaches, into float rows padded
  // to 16 values (the padding is zeroed: the vector vertical kernels read it).
  const int y_first = ver.first[0];
  const int rows = ver.first[height - 1] + ver.count[height - 1] - y_first;
  const int nvals = 3 * width;
  const size_t tstride = (static_cast<size_t>(nvals) + 15) / 16 * 16;
  std::shared_ptr<uint8_t> tmp_buf = ctx.buffers.get(tstride * rows * sizeof(float));
  float* tmp = reinterpret_cast<float*>(tmp_buf.get());
  const int threads = ctx.pool ? ctx.pool->size() : 1;
  const size_t scratch_floats = (kern.horizontal_scratch(hor) + 15) / 16 * 16;
  std::shared_ptr<uint8_t> scratch_buf =
      scratch_floats ? ctx.buffers.get(scratch_floats * threads * sizeof(float)) : nullptr;
  const int block = kern.block_rows;
  const int nblocks = (rows + block - 1) / block;
  const int64_t block_work = static_cast<int64_t>(block) * nvals * hor.taps;
  for_items(ctx.pool, nblocks, block_work, [&](int b0, int b1) {
    float* scratch = scratch_buf ? reinterpret_cast<float*>(scratch_buf.get()) +
                                       scratch_floats * (ctx.pool ? ctx.pool->thread_index() : 0)
                                 : nullptr;
    for (int b = b0; b < b1; ++b) {
      const int r0 = b * block, n = std::min(block, rows - r0);
      float* d = tmp + tstride * r0;
      kern.horizontal(src.row(y_first + r0), src.stride(), n, d, tstride, hor, scratch);
      for (int r = 0; r < n; ++r) std::fill(d + tstride * r + nvals, d + tstride * (r + 1), 0.0f);
    }
  });

  Image out(width, height, ctx.buffers);
  for_items(ctx.pool, height, static_cast<int64_t>(nvals) * ver.taps, [&](int y0, int y1) {
    std::vector<const float*> in(ver.taps);
    for (int y = y0; y < y1; ++y) {
      const int n = ver.count[y];
      for (int j = 0; j < n; ++j) in[j] = tmp + tstride * (ver.first[y] - y_first + j);
      kern.vertical(in.data(), &ver.w[static_cast<size_t>(y) * ver.taps], n, ver.fused[y],
                    out.row(y), nvals);
    }
  });
  return out;
}

}  // namespace mmrt::media
