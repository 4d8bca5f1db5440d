// Linear-layer kernels on Qwen2-VL-2B shapes: decode (matrix-vector, memory-bound) against the
// machine's measured read bandwidth, and prefill GEMM (M = 512) per library and weight format.
//
//   build/release/bench/bench_linear                      # everything
//   build/release/bench/bench_linear --benchmark_filter=decode
//   build/release/bench/bench_linear --benchmark_filter=encoder   # bf16 vs int8 x int8 GEMMs
//
// Counters: GBs = weight bytes streamed per second, bw_frac = GBs / measured read bandwidth
// (best whole pass, bw_GBs), GFLOPs = 2 * n * in * out per second. The *_best counters use the
// fastest single call against the fastest 32 MiB bandwidth window (bw_win_GBs). Decode also
// reports bw_frac_paired (see BM_decode): the most robust figure on a machine shared with other
// work, where the means mostly measure the other tenants. Decode rotates through enough copies
// of the weights to exceed the last-level cache, as a real model's layers do.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/cpu.h"
#include "core/isa.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/bandwidth.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/linear.h"

using namespace mmrt;
using namespace mmrt::kernels;

namespace {

constexpr size_t kRotateBytes = size_t{768} << 20;  // weights touched per rotation (> LLC)

// The bench's compute: every CPU, the best kernel variant (MMRT_BENCH_ISA caps it: portable,
// avx2, avx512, avx512bf16).
const CpuBackend& be() {
  static const CpuBackend b([] {
    BackendOptions o;
    if (const char* v = std::getenv("MMRT_BENCH_ISA"))
      if (auto isa = parse_isa(v)) o.max_isa = *isa;
    return o;
  }());
  return b;
}

// Read bandwidth of this machine with the bench's pool: 1 GiB in 32 MiB windows, 8 passes.
const ReadBandwidth& bandwidth() {
  static const ReadBandwidth bw = [] {
    const ReadBandwidth v = measure_read_bandwidth(be(), size_t{1} << 30, size_t{32} << 20, 8);
    std::fprintf(stderr,
                 "measured read bandwidth (%d threads, 1 GiB in 32 MiB windows, 8 passes): best "
                 "pass %.2f GB/s, best window %.2f GB/s\n",
                 be().threads(), v.pass_gbs, v.window_gbs);
    return v;
  }();
  return bw;
}

Tensor random_weights(int64_t out, int64_t in, uint32_t seed) {
  Tensor t = Tensor::empty(DType::kF32, {out, in});  // [out, in]
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;     // cheap LCG: uniform in [-0.05, 0.05)
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = (static_cast<float>(s >> 40) * (1.f / 16777216.f) - 0.5f) * 0.1f;
  }
  return t;
}

// Packed copies of one weight shape whose total size exceeds kRotateBytes (at least one).
std::vector<PackedLinear> weight_copies(int64_t out, int64_t in, WeightFormat fmt,
                                        size_t max_bytes) {
  const Tensor w = random_weights(out, in, 42);
  const Tensor src = fmt == WeightFormat::kBF16 ? w.to(DType::kBF16) : w;
  std::vector<PackedLinear> v;
  v.push_back(PackedLinear::pack(be(), src, nullptr, fmt));
  const size_t one = v[0].weight_bytes();
  const size_t want = std::max<size_t>(1, (max_bytes + one - 1) / one);
  while (v.size() < want) v.push_back(PackedLinear::pack(be(), src.clone(), nullptr, fmt));
  return v;
}

void set_counters(benchmark::State& st, int64_t n, int64_t in, int64_t out, size_t wbytes,
                  double best_s) {
  const double iters = static_cast<double>(st.iterations());
  st.counters["GBs_best"] = static_cast<double>(wbytes) * 1e-9 / best_s;
  st.counters["bw_frac_best"] =
      static_cast<double>(wbytes) * 1e-9 / best_s / bandwidth().window_gbs;
  st.counters["GFLOPs_best"] = 2.0 * static_cast<double>(n * in * out) * 1e-9 / best_s;
  st.counters["GBs"] =
      benchmark::Counter(iters * static_cast<double>(wbytes) * 1e-9, benchmark::Counter::kIsRate);
  st.counters["bw_frac"] =
      benchmark::Counter(iters * static_cast<double>(wbytes) * 1e-9 / bandwidth().pass_gbs,
                         benchmark::Counter::kIsRate);
  st.counters["GFLOPs"] = benchmark::Counter(iters * 2.0 * static_cast<double>(n * in * out) * 1e-9,
                                             benchmark::Counter::kIsRate);
  st.counters["bw_GBs"] = bandwidth().pass_gbs;
  st.counters["bw_win_GBs"] = bandwidth().window_gbs;
}

// The streamer used to time bandwidth windows next to decode calls (1 GiB: beyond the caches).
ReadStreamer& streamer() {
  static ReadStreamer rs(be(), size_t{1} << 30);
  return rs;
}

// args: out, in, n, format, path (0 auto, 1 gemv, 2 gemm), int8 activations (0 q8, 1 float)
// Each iteration times one call and one bandwidth window of the same byte count (alternating
// order); bw_frac_paired is the median over iterations of window time / call time.
void BM_decode(benchmark::State& st) {
  const int64_t out = st.range(0), in = st.range(1), n = st.range(2);
  const auto fmt = static_cast<WeightFormat>(st.range(3));
  LinearOptions opt;
  opt.path = static_cast<LinearPath>(st.range(4));
  opt.int8_x = st.range(5) ? Int8Activations::kFloat : Int8Activations::kQ8;
  bandwidth();
  streamer();
  const auto ws = weight_copies(out, in, fmt, kRotateBytes);
  const size_t wbytes = ws[0].weight_bytes();
  const Tensor x = random_weights(n, in, 7);           // [n, in]
  std::vector<float> y(static_cast<size_t>(n * out));  // [n, out]
  size_t i = 0;
  double best = 1e30;
  std::vector<double> ratios;
  for (auto _ : st) {
    double t_win = 0;
    if (i % 2) t_win = streamer().read_next(wbytes);
    Stopwatch sw;
    linear(be(), x.data<float>(), n, ws[i % ws.size()], y.data(), opt);
    const double t = sw.seconds();
    if (i % 2 == 0) t_win = streamer().read_next(wbytes);
    st.SetIterationTime(t);  // the window read is not part of the measured time
    best = std::min(best, t);
    ratios.push_back(t_win / t);
    benchmark::DoNotOptimize(y.data());
    ++i;
  }
  set_counters(st, n, in, out, wbytes, best);
  std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
  st.counters["bw_frac_paired"] = ratios[ratios.size() / 2];
  st.SetLabel(std::string(weight_format_name(fmt)) + " " + linear_plan(be(), n, ws[0], opt).kernel +
              " x" + std::to_string(ws.size()) + " copies");
}

// args: out, in, m, format, f32 library (0 auto, 1 onednn, 2 openblas)
// encoder: the weights as the vision towers pack them (EncoderPrecision::block_placement):
// bf16 left in place (a view), int8 with q8row for the int8 GEMM alone (blocked where it can).
void prefill(benchmark::State& st, bool encoder) {
  const int64_t out = st.range(0), in = st.range(1), m = st.range(2);
  const auto fmt = static_cast<WeightFormat>(st.range(3));
  LinearOptions opt;
  opt.path = LinearPath::kGemm;
  opt.f32_gemm = static_cast<GemmLibrary>(st.range(4));
  if (st.range(5)) opt.int8_gemm = Int8Gemm::kQ8Row;
  bandwidth();
  const Tensor w = random_weights(out, in, 43);
  const WeightPlacement place = !encoder      ? WeightPlacement::kCopy
                                : st.range(5) ? WeightPlacement::kGemmOnly
                                              : WeightPlacement::kViewIfPossible;
  const PackedLinear p = PackedLinear::pack(
      be(), fmt == WeightFormat::kBF16 ? w.to(DType::kBF16) : w, nullptr, fmt, place);
  const Tensor x = random_weights(m, in, 8);           // [m, in]
  std::vector<float> y(static_cast<size_t>(m * out));  // [m, out]
  linear(be(), x.data<float>(), m, p, y.data(), opt);  // warm-up: primitives, scratch
  double best = 1e30;
  for (auto _ : st) {
    Stopwatch sw;
    linear(be(), x.data<float>(), m, p, y.data(), opt);
    best = std::min(best, sw.seconds());
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(st, m, in, out, p.weight_bytes(), best);
  st.SetLabel(std::string(weight_format_name(fmt)) + (p.blocked() ? " blocked " : " ") +
              linear_plan(be(), m, p, opt).kernel);
}
void BM_prefill(benchmark::State& st) {
  prefill(st, false);
}
void BM_encoder(benchmark::State& st) {
  prefill(st, true);
}

constexpr int64_t kShapes[][2] = {
    {1536, 1536}, {256, 1536}, {8960, 1536}, {1536, 8960}, {151936, 1536}};
constexpr int kF32 = static_cast<int>(WeightFormat::kF32);
constexpr int kBF16 = static_cast<int>(WeightFormat::kBF16);
constexpr int kInt8 = static_cast<int>(WeightFormat::kInt8);

void decode_args(benchmark::internal::Benchmark* b) {
  for (auto [out, in] : kShapes)
    for (int64_t n : {1, 8})
      for (int fmt : {kBF16, kInt8, kF32}) {
        b->Args({out, in, n, fmt, 0, 0});
        if (fmt == kInt8) b->Args({out, in, n, fmt, 0, 1});
      }
}
void crossover_args(benchmark::internal::Benchmark* b) {
  for (int fmt : {kBF16, kInt8, kF32})
    for (int64_t n : {2, 4, 6, 8, 12, 16, 32})
      for (int path : {1, 2}) b->Args({8960, 1536, n, fmt, path, 0});
}
// Row length at a fixed 27.5 MB of bf16 weights, batch 1 (the down projection is the long one).
void row_length_args(benchmark::internal::Benchmark* b) {
  for (int64_t in : {1536, 2240, 4480, 8960, 17920})
    b->Args({8960 * 1536 / in, in, 1, kBF16, 0, 0});
}
void prefill_args(benchmark::internal::Benchmark* b) {
  for (auto [out, in] : kShapes) {
    b->Args({out, in, 512, kBF16, 0, 0});
    b->Args({out, in, 512, kInt8, 0, 0});
    b->Args({out, in, 512, kF32, 1, 0});
    b->Args({out, in, 512, kF32, 2, 0});
  }
}
// The Qwen2-VL-2B vision tower's linears (embed 1280, MLP 5120) over a 448x448 image's 1024
// patches: bf16, and int8 with x quantised per row (the encoders' int8 blocks).
void encoder_args(benchmark::internal::Benchmark* b) {
  constexpr int64_t kVit[][2] = {{3840, 1280}, {1280, 1280}, {5120, 1280}, {1280, 5120}};
  for (auto [out, in] : kVit) {
    b->Args({out, in, 1024, kBF16, 0, 0});
    b->Args({out, in, 1024, kInt8, 0, 1});
  }
}

// LLaVA-1.5 7B's projector (CLIP's 1024 to 4096, then 4096 to 4096) over a 336x336 image's 576
// patches, bf16: `projector_view` with the weights left in place as the towers pack them,
// `projector_copy` in the GEMM's blocked layout.
void projector_args(benchmark::internal::Benchmark* b) {
  for (int64_t in : {1024, 4096}) b->Args({4096, in, 576, kBF16, 0, 0});
}

}  // namespace

BENCHMARK(BM_encoder)
    ->Name("projector_view")
    ->ArgNames({"out", "in", "m", "fmt", "lib", "q8row"})
    ->Apply(projector_args)
    ->UseRealTime()
    ->MinTime(1.0)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_prefill)
    ->Name("projector_copy")
    ->ArgNames({"out", "in", "m", "fmt", "lib", "q8row"})
    ->Apply(projector_args)
    ->UseRealTime()
    ->MinTime(1.0)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decode)
    ->Name("decode")
    ->ArgNames({"out", "in", "n", "fmt", "path", "ix"})
    ->Apply(decode_args)
    ->UseManualTime()
    ->MinTime(0.5);
BENCHMARK(BM_decode)
    ->Name("row_length")
    ->ArgNames({"out", "in", "n", "fmt", "path", "ix"})
    ->Apply(row_length_args)
    ->UseManualTime()
    ->MinTime(0.5);
BENCHMARK(BM_decode)
    ->Name("crossover")
    ->ArgNames({"out", "in", "n", "fmt", "path", "ix"})
    ->Apply(crossover_args)
    ->UseManualTime()
    ->MinTime(0.5);
BENCHMARK(BM_prefill)
    ->Name("prefill")
    ->ArgNames({"out", "in", "m", "fmt", "lib", "q8row"})
    ->Apply(prefill_args)
    ->UseRealTime()
    ->MinTime(1.0)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_encoder)
    ->Name("encoder")
    ->ArgNames({"out", "in", "m", "fmt", "lib", "q8row"})
    ->Apply(encoder_args)
    ->UseRealTime()
    ->MinTime(1.0)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
