// Media kernels in isolation, one thread: PIL-exact resize per kernel variant (4K -> 1316x728
// bicubic, the Qwen2-VL max_pixels=1003520 target; and 1920x1080 -> 1316x728, the fast-mode
// case) and the fused normalise + patchify. End-to-end decode + preprocess against PIL and
// OpenCV is bench/media_compare.py.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>

#include "core/cpu.h"
#include "media/resize.h"
#include "models/qwen2_vl/image_processor.h"

using namespace mmrt;
using namespace mmrt::media;

namespace {

// A photo-like test card: smooth gradients plus mild noise (so no kernel can shortcut).
Image make_image(int w, int h) {
  Image im(w, h);
  std::mt19937 rng(7);
  for (int y = 0; y < h; ++y) {
    uint8_t* r = im.row(y);
    for (int x = 0; x < w; ++x) {
      const int n = static_cast<int>(rng() % 16);
      r[3 * x] = static_cast<uint8_t>((x * 255 / w + n) & 255);
      r[3 * x + 1] = static_cast<uint8_t>((y * 255 / h + n) & 255);
      r[3 * x + 2] = static_cast<uint8_t>(((x + y) * 127 / (w + h) + 2 * n) & 255);
    }
  }
  return im;
}

void BM_Resize(benchmark::State& state, const char* isa, int sw, int sh, ResizeFilter f) {
  const auto cap = parse_isa(isa);
  if (!cap || !isa_supported(*cap)) {
    state.SkipWithError("kernel variant not supported on this CPU");
    return;
  }
  const MediaContext ctx{.isa = *cap, .buffers = BufferCache::create()};
  Image src = make_image(sw, sh);
  for (auto _ : state) {
    Image out = resize(src, 1316, 728, f, ctx);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["Mpix_in/s"] =
      benchmark::Counter(double(sw) * sh * state.iterations() / 1e6, benchmark::Counter::kIsRate);
}

void BM_Patchify(benchmark::State& state) {
  Image img = make_image(1316, 728);
  models::qwen2_vl::ImageProcessorConfig cfg;
  const MediaContext ctx{.buffers = BufferCache::create()};
  for (auto _ : state) {
    Tensor pv = models::qwen2_vl::patchify(img, cfg, ctx);
    benchmark::DoNotOptimize(pv.raw());
  }
  state.counters["values/s"] =
      benchmark::Counter(1316.0 * 728 * 3 * 2 * state.iterations(), benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK_CAPTURE(BM_Resize, 4k_bicubic_scalar, "scalar", 3840, 2160, ResizeFilter::kBicubic)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Resize, 4k_bicubic_avx2, "avx2", 3840, 2160, ResizeFilter::kBicubic)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Resize, 4k_bicubic_avx512, "avx512", 3840, 2160, ResizeFilter::kBicubic)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Resize, 1080p_bicubic_avx2, "avx2", 1920, 1080, ResizeFilter::kBicubic)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Resize, 1080p_bicubic_avx512, "avx512", 1920, 1080, ResizeFilter::kBicubic)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Resize, 4k_bilinear_avx512, "avx512", 3840, 2160, ResizeFilter::kBilinear)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Patchify)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
