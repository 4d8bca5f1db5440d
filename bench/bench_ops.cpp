// Element-wise, rotary and attention kernels on Qwen2-VL-2B shapes (hidden 1536, 12 query heads,
// 2 kv heads, head_dim 128).
//
//   build/release/bench/bench_ops                              # everything
//   build/release/bench/bench_ops --benchmark_filter=Decode
//
// Counters: GBs = K/V bytes read per second (decode; the caches of enough layers are rotated to
// exceed the last-level cache, as a real model's layers do), bw_frac = GBs / this machine's
// measured read bandwidth, GFLOPs = attention FLOPs per second (prefill: 4 * head_dim per visible
// query-key pair and head, causal). The last argument of each benchmark is the thread count.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/cpu/bandwidth.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/kv_cache.h"
#include "kernels/ops.h"
#include "kernels/rope.h"
#include "kernels/scratch.h"
#include "models/encoder_block.h"

using namespace mmrt;
using namespace mmrt::kernels;

namespace {

constexpr int kHidden = 1536, kHeads = 12, kKvHeads = 2, kHeadDim = 128;
constexpr size_t kRotateBytes = size_t{512} << 20;  // K/V bytes touched per rotation (> LLC)

// One thread or every CPU, the best kernel variant.
const CpuBackend& backend(int threads) {
  static const CpuBackend one({.threads = 1});
  static const CpuBackend all({.threads = cpu_count()});
  return threads == 1 ? one : all;
}

double bandwidth_gbs() {
  static const double bw = [] {
    const double v = measure_read_bandwidth_gbs(backend(0), size_t{1} << 30, 5);
    std::fprintf(stderr, "measured read bandwidth: %.2f GB/s (%d threads, 1 GiB, best of 5)\n", v,
                 backend(0).threads());
    return v;
  }();
  return bw;
}

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

int threads_arg(const benchmark::State& st, int i) {
  return st.range(i) == 0 ? cpu_count() : int(st.range(i));
}

void BM_RmsNorm(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto x = random_vec(size_t(n * kHidden), 1);
  std::vector<float> y(x.size());
  Tensor w = Tensor::empty(DType::kBF16, {kHidden});
  std::fill_n(static_cast<uint16_t*>(w.raw()), kHidden, uint16_t(0x3f80));  // 1.0
  const Backend& tp = backend(threads_arg(st, 1));
  for (auto _ : st) {
    rms_norm(tp, x.data(), w, 1e-6f, y.data(), n, kHidden);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * n * kHidden * 8);
}
BENCHMARK(BM_RmsNorm)->ArgNames({"n", "threads"})->Args({1, 1})->Args({512, 1})->Args({512, 0});

// M-RoPE on q (12 heads) and k (2 heads) inside a fused qkv row. angles=1 also computes the
// per-step cos/sin (done once per step and shared by all layers); angles=0 is the per-layer cost.
void BM_Rope(benchmark::State& st) {
  const int64_t n = st.range(0);
  const bool with_angles = st.range(1) != 0;
  const int32_t sec[] = {16, 24, 24};
  RopeTable table = make_mrope_table(kHeadDim, 1e6, sec);
  std::vector<int32_t> pos(size_t(3 * n));
  std::iota(pos.begin(), pos.end(), 100);
  const int64_t stride = (kHeads + 2 * kKvHeads) * kHeadDim;
  auto qkv = random_vec(size_t(n * stride), 2);
  const Backend& tp = backend(threads_arg(st, 2));
  RopeAngles a = rope_angles(tp, table, pos.data(), n);
  for (auto _ : st) {
    if (with_angles) a = rope_angles(tp, table, pos.data(), n);
    apply_rope(tp, a, qkv.data(), kHeads, stride);
    apply_rope(tp, a, qkv.data() + kHeads * kHeadDim, kKvHeads, stride);
    benchmark::DoNotOptimize(qkv.data());
  }
  st.SetItemsProcessed(int64_t(st.iterations()) * n);
}
BENCHMARK(BM_Rope)
    ->ArgNames({"n", "angles", "threads"})
    ->ArgsProduct({{1, 512}, {0, 1}, {1}})
    ->Args({512, 1, 0});

// Decode: one query token per sequence over kv_len cached tokens; `seqs` sequences per call.
void BM_DecodeAttention(benchmark::State& st) {
  const int32_t kv_len = int32_t(st.range(0)), seqs = int32_t(st.range(1));
  const DType dt = st.range(2) ? DType::kBF16 : DType::kF32;
  const Backend& tp = backend(threads_arg(st, 3));
  const int32_t bs = st.range(4) > 0 ? int32_t(st.range(4)) : 16;
  const int32_t blocks_per_seq = (kv_len + bs - 1) / bs;
  const size_t kv_bytes_per_layer =
      size_t(seqs) * kv_len * kKvHeads * kHeadDim * 2 * dtype_size(dt);
  const int32_t layers = int32_t(std::clamp<size_t>(kRotateBytes / kv_bytes_per_layer, 1, 256));
  KvCache cache(tp, {.n_layers = layers,
                     .num_blocks = seqs * blocks_per_seq,
                     .block_size = bs,
                     .n_kv_heads = kKvHeads,
                     .head_dim = kHeadDim,
                     .dtype = dt});
  // Block tables shuffled (in_order 0) or consecutive, every slot written with random K/V in
  // every layer.
  std::vector<int32_t> perm(size_t(seqs * blocks_per_seq));
  std::iota(perm.begin(), perm.end(), 0);
  if (st.range(5) == 0) std::shuffle(perm.begin(), perm.end(), std::mt19937(3));
  std::vector<int32_t> slots(size_t(cache.num_slots()));
  std::iota(slots.begin(), slots.end(), 0);
  auto kv = random_vec(slots.size() * kKvHeads * kHeadDim, 4);
  for (int32_t l = 0; l < layers; ++l)
    cache.write(l, kv.data(), kv.data(), slots.data(), int64_t(slots.size()));
  std::vector<AttnSeq> batch;
  for (int32_t s = 0; s < seqs; ++s)
    batch.push_back({.q_begin = s,
                     .n_q = 1,
                     .kv_len = kv_len,
                     .block_table = perm.data() + size_t(s) * blocks_per_seq});
  auto q = random_vec(size_t(seqs) * kHeads * kHeadDim, 5);
  std::vector<float> out(q.size());
  PagedAttentionArgs args{.q = q.data(), .out = out.data(), .n_tokens = seqs, .n_heads = kHeads};
  int32_t layer = 0;
  for (auto _ : st) {
    paged_attention(tp, args, cache.layer(layer), batch);
    layer = (layer + 1) % layers;
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = double(st.iterations()) * double(kv_bytes_per_layer);
  st.SetBytesProcessed(int64_t(bytes));
  st.counters["GBs"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
  st.counters["bw_frac"] =
      benchmark::Counter(bytes / 1e9 / bandwidth_gbs(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeAttention)
    ->ArgNames({"kv_len", "seqs", "bf16", "threads", "block", "in_order"})
    ->ArgsProduct({{512, 4096}, {1}, {0, 1}, {1, 0}, {16}, {0}})
    ->ArgsProduct({{4096}, {1, 8}, {1}, {0}, {64}, {0, 1}})
    ->ArgsProduct({{4096}, {1, 8}, {1}, {0}, {16}, {1}})
    ->UseRealTime();

// Prefill: n new tokens of one sequence after ctx cached ones, causal, over the paged cache;
// kv: 0 f32 cache, 1 bf16 cache, 2 bf16 cache and bf16 products (PagedAttentionArgs::bf16).
void BM_PrefillAttention(benchmark::State& st) {
  const int32_t n = int32_t(st.range(0)), ctx = int32_t(st.range(1)), len = n + ctx;
  const DType dt = st.range(2) ? DType::kBF16 : DType::kF32;
  const Backend& tp = backend(threads_arg(st, 3));
  const int32_t bs = 16, blocks = (len + bs - 1) / bs;
  KvCache cache(tp, {.n_layers = 1,
                     .num_blocks = blocks,
                     .block_size = bs,
                     .n_kv_heads = kKvHeads,
                     .head_dim = kHeadDim,
                     .dtype = dt});
  std::vector<int32_t> table(static_cast<size_t>(blocks)), slots(static_cast<size_t>(len));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(6));
  for (int32_t t = 0; t < len; ++t) slots[size_t(t)] = table[size_t(t / bs)] * bs + t % bs;
  auto k = random_vec(size_t(len) * kKvHeads * kHeadDim, 7);
  auto v = random_vec(k.size(), 8);
  cache.write(0, k.data(), v.data(), slots.data(), len);
  auto q = random_vec(size_t(n) * kHeads * kHeadDim, 9);
  std::vector<float> out(q.size());
  AttnSeq seq{.q_begin = 0, .n_q = n, .kv_len = len, .block_table = table.data()};
  PagedAttentionArgs args{
      .q = q.data(), .out = out.data(), .n_tokens = n, .n_heads = kHeads, .bf16 = st.range(2) == 2};
  for (auto _ : st) {
    paged_attention(tp, args, cache.layer(0), std::span<const AttnSeq>(&seq, 1));
    benchmark::DoNotOptimize(out.data());
  }
  const double pairs = double(n) * ctx + double(n) * (n + 1) / 2;
  const double flops = double(st.iterations()) * pairs * kHeads * kHeadDim * 4;
  st.counters["GFLOPs"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PrefillAttention)
    ->ArgNames({"n", "ctx", "kv", "threads"})
    ->ArgsProduct({{512}, {0, 4096}, {0, 1, 2}, {1, 0}})
    ->UseRealTime();

// Vision tower: bidirectional attention over one 1024-patch image, 16 heads of 80 (Qwen2-VL);
// bf16 = 1: the 16-bit encoders' bf16 products (VarlenAttentionArgs::bf16).
void BM_VisionAttention(benchmark::State& st) {
  const int32_t n = int32_t(st.range(0)), heads = 16, hd = 80;
  const Backend& tp = backend(threads_arg(st, 2));
  const int64_t stride = 3 * heads * hd;
  auto qkv = random_vec(size_t(n) * stride, 10);
  std::vector<float> out(size_t(n) * heads * hd);
  const int32_t cu[] = {0, n};
  VarlenAttentionArgs args{.q = qkv.data(),
                           .k = qkv.data() + heads * hd,
                           .v = qkv.data() + 2 * heads * hd,
                           .out = out.data(),
                           .q_stride = stride,
                           .k_stride = stride,
                           .v_stride = stride,
                           .cu_seqlens = cu,
                           .n_heads = heads,
                           .n_kv_heads = heads,
                           .head_dim = hd,
                           .mask = MaskKind::kFull,
                           .bf16 = st.range(1) != 0,
                           .int8_scores = st.range(1) == 2};
  if (args.int8_scores && !varlen_int8_scores_supported(tp)) {
    st.SkipWithError("no int8 attention scores on this CPU");
    return;
  }
  for (auto _ : st) {
    varlen_attention(tp, args);
    benchmark::DoNotOptimize(out.data());
  }
  const double flops = double(st.iterations()) * double(n) * n * heads * hd * 4;
  st.counters["GFLOPs"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_VisionAttention)
    ->ArgNames({"n", "bf16", "threads"})  // bf16 2: int8 scores, bf16 P . V
    ->ArgsProduct({{1024, 4096}, {0, 1, 2}, {1, 0}})
    ->UseRealTime();

// One Qwen2-VL-2B vision block (embed 1280, 16 heads, MLP 5120, quick-GELU, 2-D rotary) over a
// 448² image's 1024 patches: int8 = 1 is an int8 block of the quantised tower (int8 weights per
// channel, x per row: EncoderPrecision::block_options), 2 the same with int8 attention scores
// (EncoderPrecision::int8_scores, where the CPU has them), 0 its bf16 block. The ratio of the two
// is what the int8 tower can gain per block; GFLOPs counts the linears and the attention.
void BM_EncoderBlock(benchmark::State& st) {
  const int64_t n = st.range(0), E = 1280, mlp = 5120;
  const int32_t heads = 16;
  const bool int8 = st.range(1) != 0;
  const Backend& be = backend(threads_arg(st, 2));
  const WeightFormat f = int8 ? WeightFormat::kInt8 : WeightFormat::kBF16;
  auto tensor = [](std::vector<int64_t> shape, uint32_t seed, float scale) {
    Tensor t = Tensor::empty(DType::kF32, Shape(shape));
    auto v = random_vec(size_t(t.numel()), seed);
    for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i] * scale;
    return t;
  };
  models::EncoderPrecision prec;
  prec.int8 = int8;
  prec.int8_scores = st.range(1) == 2;
  if (prec.int8_scores && !varlen_int8_scores_supported(be)) {
    st.SkipWithError("no int8 attention scores on this CPU");
    return;
  }
  auto lin = [&](int64_t out, int64_t in, uint32_t seed) {  // as the tower loads a bf16 checkpoint
    const Tensor w = tensor({out, in}, seed, 0.02f).to(DType::kBF16);
    const Tensor b = tensor({out}, seed + 1, 0.02f).to(DType::kBF16);
    return PackedLinear::pack(be, w, &b, f, prec.block_placement(0, 32));
  };
  models::EncoderBlock b;
  b.ln1_w = tensor({E}, 1, 0.1f);
  b.ln1_b = tensor({E}, 2, 0.1f);
  b.ln2_w = tensor({E}, 3, 0.1f);
  b.ln2_b = tensor({E}, 4, 0.1f);
  b.qkv = lin(3 * E, E, 10);
  b.proj = lin(E, E, 20);
  b.fc1 = lin(mlp, E, 30);
  b.fc2 = lin(E, mlp, 40);
  b.opt = prec.block_options(0, 32);
  b.bf16_attention = true;
  b.int8_attention = prec.int8_attention(0, 32);
  std::vector<int32_t> pos(size_t(2 * n));
  for (int64_t i = 0; i < n; ++i)
    pos[size_t(i)] = int32_t(i / 32), pos[size_t(n + i)] = int32_t(i % 32);
  const RopeAngles angles = rope_angles(be, make_vision_rope_table(E / heads), pos.data(), n);
  auto x0 = random_vec(size_t(n * E), 5);
  // The tower's buffers: the backend's memory (huge pages from 4 MiB, as the tower's are).
  Buffer x(be, n * E), h(be, n * E), qkv(be, 3 * n * E), attn(be, n * E), act(be, n * mlp);
  const int32_t cu[] = {0, int32_t(n)};
  const models::EncoderStep s{.n = n,
                              .embed = E,
                              .mlp = mlp,
                              .heads = heads,
                              .cu_seqlens = cu,
                              .rope = &angles,
                              .x = x.data(),
                              .h = h.data(),
                              .qkv = qkv.data(),
                              .attn = attn.data(),
                              .act = act.data()};
  for (auto _ : st) {
    st.PauseTiming();
    std::copy(x0.begin(), x0.end(), x.data());
    st.ResumeTiming();
    models::run_encoder_block(be, b, s);
    benchmark::DoNotOptimize(x.data());
  }
  const double flops = double(st.iterations()) * (2.0 * n * E * (3 * E + E + 2 * mlp) +
                                                  4.0 * double(n) * double(n) * double(E));
  st.counters["GFLOPs"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EncoderBlock)
    ->ArgNames({"n", "int8", "threads"})
    ->ArgsProduct({{1024}, {0, 1, 2}, {0}})
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
