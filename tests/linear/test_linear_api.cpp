// PackedLinear packing rules, fused (concatenated) weights, threading invariance, the path
// choice, input validation and the bandwidth probe.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/convert.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/isa.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/bandwidth.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/linear_impl.h"
#include "kernels/linear.h"
#include "kernels/ops.h"

using namespace mmrt;
using namespace mmrt::kernels;

namespace {

// Two threads, the best variant: what tests without a backend of their own run on.
const CpuBackend& be2() {
  static const CpuBackend b({.threads = 2});
  return b;
}

Tensor random_f32(Shape s, uint32_t seed) {
  Tensor t = Tensor::empty(DType::kF32, std::move(s));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = nd(rng);
  return t;
}

// Double-precision y = x . W^T + b on the stored weights of `p` (independent of the kernels),
// and mag = |x| . |W|^T + |b|.
void naive(const Tensor& x, const PackedLinear& p, std::vector<double>& y,
           std::vector<double>& mag) {
  const int64_t n = x.dim(0), k = p.in(), m = p.out();
  y.assign(static_cast<size_t>(n * m), 0.0);
  mag.assign(static_cast<size_t>(n * m), 0.0);
  const float* xs = x.data<float>();
  const Tensor stored = p.weight();  // row-major, whatever the packed layout
  const void* wd = stored.raw();
  for (int64_t o = 0; o < m; ++o) {
    std::vector<double> w(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) {
      switch (p.format()) {
        case WeightFormat::kF32:
          w[i] = static_cast<const float*>(wd)[o * k + i];
          break;
        case WeightFormat::kBF16:
          w[i] = bf16_to_f32_scalar(static_cast<const uint16_t*>(wd)[o * k + i]);
          break;
        case WeightFormat::kInt8:
          w[i] = static_cast<double>(static_cast<const int8_t*>(wd)[o * k + i]) * p.scales()[o];
          break;
        case WeightFormat::kFp8:
          w[i] = static_cast<double>(e4m3_to_f32(static_cast<const uint8_t*>(wd)[o * k + i])) *
                 p.scales()[o];
          break;
      }
    }
    const double b = p.bias() ? p.bias()[o] : 0.0;
    for (int64_t j = 0; j < n; ++j) {
      double s = b, a = std::fabs(b);
      for (int64_t i = 0; i < k; ++i) {
        s += xs[j * k + i] * w[i];
        a += std::fabs(xs[j * k + i] * w[i]);
      }
      y[j * m + o] = s;
      mag[j * m + o] = a;
    }
  }
}

void expect_close(const std::vector<float>& y, const std::vector<double>& ref,
                  const std::vector<double>& mag, double rel, const char* what) {
  ASSERT_EQ(y.size(), ref.size());
  size_t bad = 0;
  for (size_t i = 0; i < y.size(); ++i)
    if (!(std::fabs(y[i] - ref[i]) <= rel * mag[i]) && ++bad <= 5)
      ADD_FAILURE() << what << " [" << i << "]: got " << y[i] << " want " << ref[i];
  EXPECT_EQ(bad, 0u) << what;
}

// y = linear(x, p) against the naive product of x and p's stored weights, within `rel`.
void expect_naive(const Tensor& x, const PackedLinear& p, const Tensor& y, double rel,
                  const char* what) {
  std::vector<double> ref, mag;
  naive(x, p, ref, mag);
  expect_close(std::vector<float>(y.data<float>(), y.data<float>() + y.numel()), ref, mag, rel,
               what);
}

TEST(PackedLinear, PlacementCopiesOrViews) {
  const Tensor w = random_f32({7, 33}, 1).to(DType::kBF16);
  // Default: a copy of its own with the same bytes.
  const PackedLinear c = PackedLinear::pack(be2(), w, nullptr, WeightFormat::kBF16);
  EXPECT_FALSE(c.zero_copy());
  EXPECT_NE(c.weight_data(), w.raw());
  EXPECT_EQ(std::memcmp(c.weight().raw(), w.raw(), 7 * 33 * 2), 0);
  // A big one (huge-page allocation path) copies exactly too.
  const Tensor big = random_f32({1024, 2056}, 4).to(DType::kBF16);  // 4.0 MiB
  const PackedLinear cb = PackedLinear::pack(be2(), big, nullptr, WeightFormat::kBF16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(cb.weight_data()) % (2u << 20), 0u);
  EXPECT_EQ(std::memcmp(cb.weight().raw(), big.raw(), big.nbytes()), 0);
  // View when asked and possible.
  const PackedLinear p =
      PackedLinear::pack(be2(), w, nullptr, WeightFormat::kBF16, WeightPlacement::kViewIfPossible);
  EXPECT_TRUE(p.zero_copy());
  EXPECT_FALSE(p.blocked()) << "a view is the source's memory: row-major";
  EXPECT_EQ(p.weight_data(), w.raw());
  EXPECT_EQ(p.weight_bytes(), 7u * 33u * 2u);
  const PackedLinear q = PackedLinear::pack(be2(), w.to(DType::kF16), nullptr, WeightFormat::kBF16,
                                            WeightPlacement::kViewIfPossible);
  EXPECT_FALSE(q.zero_copy());
  const PackedLinear i8 =
      PackedLinear::pack(be2(), w, nullptr, WeightFormat::kInt8, WeightPlacement::kViewIfPossible);
  EXPECT_FALSE(i8.zero_copy());
  EXPECT_EQ(i8.weight_bytes(), 7u * 33u + 7u * 4u);
}

// f32, f16, bf16 and non-contiguous sources pack to the same stored weights.
TEST(PackedLinear, SourceTypesAndStridesAgree) {
  const Tensor w = random_f32({9, 40}, 2).to(DType::kBF16).to(DType::kF32);  // exact in bf16
  const Tensor wt = random_f32({40, 9}, 3);
  for (WeightFormat fmt : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kInt8}) {
    const PackedLinear a = PackedLinear::pack(be2(), w, nullptr, fmt);
    const PackedLinear b = PackedLinear::pack(be2(), w.to(DType::kBF16), nullptr, fmt);
    const size_t bytes = a.weight_bytes() - (a.scales() ? 9 * 4 : 0);
    EXPECT_EQ(std::memcmp(a.weight_data(), b.weight_data(), bytes), 0) << weight_format_name(fmt);
    // A transposed view [9, 40] of a [40, 9] tensor: strides (1, 9).
    const Tensor view =
        Tensor::view(const_cast<void*>(wt.raw()), DType::kF32, {9, 40}, wt.owner(), {1, 9});
    const PackedLinear c =
        PackedLinear::pack(be2(), view, nullptr, fmt, WeightPlacement::kViewIfPossible);
    const PackedLinear d = PackedLinear::pack(be2(), view.contiguous(), nullptr, fmt);
    EXPECT_FALSE(c.zero_copy());
    EXPECT_EQ(std::memcmp(c.weight_data(), d.weight_data(), bytes), 0) << weight_format_name(fmt);
  }
}

TEST(PackedLinear, ConcatEqualsSeparateLayers) {
  const Backend& be = be2();
  const Tensor wq = random_f32({12, 64}, 4), wk = random_f32({4, 64}, 5),
               wv = random_f32({4, 64}, 6);
  const Tensor bq = random_f32({12}, 7), bv = random_f32({4}, 8);
  const Tensor* ws[] = {&wq, &wk, &wv};
  const Tensor* bs[] = {&bq, nullptr, &bv};
  for (WeightFormat fmt : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kInt8}) {
    const PackedLinear cat = PackedLinear::pack_concat(be2(), ws, bs, fmt);
    ASSERT_EQ(cat.out(), 20);
    ASSERT_EQ(cat.in(), 64);
    const PackedLinear sep[] = {PackedLinear::pack(be2(), wq, &bq, fmt),
                                PackedLinear::pack(be2(), wk, nullptr, fmt),
                                PackedLinear::pack(be2(), wv, &bv, fmt)};
    for (int64_t n : {1, 5, 40}) {
      const Tensor x = random_f32({n, 64}, 9);
      const Tensor y = linear(be, x, cat);  // [n, 20]
      int64_t col = 0;
      for (const PackedLinear& s : sep) {
        std::vector<double> ref, mag;
        naive(x, s, ref, mag);
        std::vector<float> got;
        for (int64_t j = 0; j < n; ++j)
          for (int64_t o = 0; o < s.out(); ++o) got.push_back(y.data<float>()[j * 20 + col + o]);
        // bf16 GEMM rounds x for n = 40; the naive reference keeps x exact. int8 decode on Q8
        // blocks of x: both quantise the same x, so the layer alone is the reference.
        const LinearPlan plan = linear_plan(be2(), n, cat);
        if (plan.x_quantised_q8) {
          const Tensor alone = linear(be, x, s);  // [n, s.out()]
          ref.assign(alone.data<float>(), alone.data<float>() + alone.numel());
        }
        expect_close(got, ref, mag, plan.x_rounded_to_bf16 ? 1e-2 : 1e-5,
                     weight_format_name(fmt).data());
        col += s.out();
      }
    }
  }
}

// Every output row is computed by exactly one thread, the same way, whatever the pool size.
TEST(Linear, GemvIndependentOfThreadCount) {
  const Tensor w = random_f32({301, 257}, 10);
  const Tensor x = random_f32({5, 257}, 11);
  for (WeightFormat fmt : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kInt8}) {
    const PackedLinear p = PackedLinear::pack(be2(), w, nullptr, fmt);
    const CpuBackend b1({.threads = 1}), b3({.threads = 3});
    const Tensor a = linear(b1, x, p), b = linear(b3, x, p);
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << weight_format_name(fmt);
  }
}

TEST(Linear, GemmAgreesWithNaiveOnLargerShape) {
  const Backend& be = be2();
  const Tensor w = random_f32({1000, 300}, 12), b = random_f32({1000}, 13);
  const Tensor x = random_f32({600, 300}, 14);  // more than one 512-row tile
  for (WeightFormat fmt : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kInt8}) {
    const PackedLinear p = PackedLinear::pack(be2(), w, &b, fmt);
    ASSERT_FALSE(linear_plan(be2(), 600, p).gemv);
    expect_naive(x, p, linear(be, x, p), linear_plan(be2(), 600, p).x_rounded_to_bf16 ? 1e-2 : 1e-5,
                 weight_format_name(fmt).data());
  }
}

// Long rows of x (k >= 4,096) take wider GEMM panels, and every panel split is as equal as its
// units of 16 channels (or 64-channel blocks) allow, on any pool size: 1,300 channels make four
// panels of 320-336, past the usual 256 (the vision towers' fc2 shape, scaled down). The result
// against the naive product, and the blocked int8 weights against the row-major ones bit for bit
// (the same int32 sums split into other panels).
TEST(Linear, WidePanelsForLongRowsSplitEvenly) {
  const Tensor w = random_f32({1300, 4160}, 90), b = random_f32({1300}, 91);
  const Tensor x = random_f32({24, 4160}, 92);
  LinearOptions gemm;
  gemm.path = LinearPath::kGemm;
  for (int threads : {2, 3}) {
    const CpuBackend be({.threads = threads});
    for (WeightFormat fmt : {WeightFormat::kF32, WeightFormat::kBF16}) {
      const PackedLinear p = PackedLinear::pack(be, w, &b, fmt);
      expect_naive(x, p, linear(be, x, p, gemm),
                   linear_plan(be, 24, p, gemm).x_rounded_to_bf16 ? 1e-2 : 1e-5,
                   weight_format_name(fmt).data());
    }
    LinearOptions q8 = gemm;
    q8.int8_gemm = Int8Gemm::kQ8Row;
    const PackedLinear rows = PackedLinear::pack(be, w, &b, WeightFormat::kInt8);
    if (!linear_plan(be, 24, rows, q8).x_quantised_q8_row) continue;
    const PackedLinear blk =
        PackedLinear::pack(be, w, &b, WeightFormat::kInt8, WeightPlacement::kGemmOnly);
    ASSERT_TRUE(blk.blocked());
    const Tensor a = linear(be, x, rows, q8), c = linear(be, x, blk, q8);
    EXPECT_EQ(std::memcmp(a.raw(), c.raw(), a.nbytes()), 0) << threads << " threads";
    expect_naive(x, rows, c, 2e-2, "int8, x q8 per row");  // x's own 8-bit rounding
  }
}

// A NaN in x comes out as NaN on every path, the Q8 decode kernel included (its block scale
// becomes NaN rather than the NaN being quantised to a finite number).
TEST(Linear, NanInXPropagates) {
  const Backend& be = be2();
  const Tensor w = random_f32({6, 130}, 18);
  Tensor x = random_f32({1, 130}, 19);
  x.data<float>()[70] = std::nanf("");
  for (WeightFormat fmt : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kInt8})
    for (auto act : {Int8Activations::kQ8, Int8Activations::kFloat}) {
      const PackedLinear p = PackedLinear::pack(be2(), w, nullptr, fmt);
      LinearOptions o;
      o.int8_x = act;
      const Tensor y = linear(be, x, p, o);
      for (int64_t i = 0; i < y.numel(); ++i)
        EXPECT_TRUE(std::isnan(y.data<float>()[i]))
            << weight_format_name(fmt) << " " << linear_plan(be2(), 1, p, o).kernel << " [" << i
            << "]";
    }
}

TEST(Linear, PathChoice) {
  const PackedLinear p =
      PackedLinear::pack(be2(), random_f32({8, 8}, 15), nullptr, WeightFormat::kBF16);
  EXPECT_TRUE(linear_plan(be2(), 1, p).gemv);
  EXPECT_TRUE(linear_plan(be2(), gemv_max_rows(WeightFormat::kBF16), p).gemv);
  EXPECT_FALSE(linear_plan(be2(), gemv_max_rows(WeightFormat::kBF16) + 1, p).gemv);
  LinearOptions o;
  o.path = LinearPath::kGemm;
  EXPECT_FALSE(linear_plan(be2(), 1, p, o).gemv);
  // bf16 products only where the CPU has them; the f32 GEMM never rounds x.
  EXPECT_EQ(linear_plan(be2(), 100, p).x_rounded_to_bf16, cpu_features().has_avx512bf16());
  const PackedLinear f =
      PackedLinear::pack(be2(), random_f32({8, 8}, 16), nullptr, WeightFormat::kF32);
  EXPECT_FALSE(linear_plan(be2(), 100, f).x_rounded_to_bf16);
  // int8 decode quantises x where the CPU has AVX512-VNNI, unless asked not to; never in the GEMM.
  const PackedLinear q =
      PackedLinear::pack(be2(), random_f32({8, 8}, 17), nullptr, WeightFormat::kInt8);
  const bool vnni = cpu_features().has_avx512() && cpu_features().avx512vnni;
  EXPECT_EQ(linear_plan(be2(), 1, q).x_quantised_q8, vnni);
  EXPECT_FALSE(linear_plan(be2(), 1, q).x_rounded_to_bf16 && vnni);
  LinearOptions fl;
  fl.int8_x = Int8Activations::kFloat;
  EXPECT_FALSE(linear_plan(be2(), 1, q, fl).x_quantised_q8);
  EXPECT_FALSE(linear_plan(be2(), 100, q).x_quantised_q8);
}

// The variant is the backend's cap, never a process-wide choice: two backends side by side run
// different variants, and a cap above what the CPU has falls back to the best it has.
// Batch invariance (BackendOptions::batch_invariant): a row's output is the same bits whatever
// rows it is computed with (alone, or at any place among 1-130 others), in every weight format
// and layout and on every kernel variant; it agrees with the naive product. Without it, the
// GEMM's rows differ from the same rows alone (the comparison can tell).
TEST(Linear, BatchInvariantRowsAreTheSameBitsAtAnyRowCount) {
  const Tensor w = random_f32({150, 77}, 60), b = random_f32({150}, 61);
  const Tensor x = random_f32({130, 77}, 62);
  int differ_without = 0;
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (!isa_supported(isa)) continue;
    const CpuBackend inv({.threads = 2, .max_isa = isa, .batch_invariant = true});
    const CpuBackend plain({.threads = 2, .max_isa = isa});
    for (WeightFormat fmt : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kInt8})
      for (WeightPlacement place : {WeightPlacement::kCopy, WeightPlacement::kViewIfPossible}) {
        const Tensor src = fmt == WeightFormat::kBF16 ? w.to(DType::kBF16) : w;
        const PackedLinear p = PackedLinear::pack(inv, src, &b, fmt, place);
        const std::string what = std::string(isa_name(isa)) + " " +
                                 std::string(weight_format_name(fmt)) +
                                 (p.blocked() ? " blocked" : "");
        for (const CpuBackend* be : {&inv, &plain}) {
          const Tensor all = linear(*be, x, p);  // 130 rows at once
          for (int64_t n : {1, 2, 3, 5, 9, 130}) {
            const int64_t r0 = 130 - n;  // the last n rows: the tested row is at every place
            const Tensor part = linear(*be, x.slice(0, r0, 130).contiguous(), p);
            const bool same =
                std::memcmp(part.data<float>(), all.data<float>() + r0 * 150, part.nbytes()) == 0;
            if (be == &inv)
              EXPECT_TRUE(same) << what << ", rows " << r0 << "..129 on their own";
            else
              differ_without += !same;
          }
        }
        expect_naive(x, p, linear(inv, x, p), fmt == WeightFormat::kF32 ? 1e-5 : 2e-2,
                     what.c_str());
      }
  }
  EXPECT_GT(differ_without, 0) << "without batch invariance the GEMM's rows must differ somewhere";
}

TEST(Linear, VariantFollowsTheBackendCap) {
  const CpuBackend portable({.threads = 1, .max_isa = Isa::kPortable});
  const CpuBackend best({.threads = 1});
  EXPECT_STREQ(linear_isa(portable.isa()), "portable");
  EXPECT_EQ(std::string(linear_isa(best.isa())), std::string(isa_name(best_isa())));
  EXPECT_EQ(best.isa(), best_isa());
  EXPECT_FALSE(parse_isa("sse9").has_value());
  const PackedLinear p =
      PackedLinear::pack(best, random_f32({8, 8}, 21), nullptr, WeightFormat::kBF16);
  EXPECT_EQ(linear_plan(portable, 1, p).kernel, "portable gemv");
  EXPECT_EQ(linear_plan(best, 1, p).kernel, std::string(isa_name(best_isa())) + " gemv");
}

// bf16 weights packed where the CPU multiplies bf16 pairs are stored blocked (64 channels x
// pairs of inputs): every row count on both paths, with `out` and `in` off the blocks' sizes,
// agrees with the naive product; a backend capped below AVX512-BF16 refuses them.
TEST(Linear, BlockedBf16WeightsOnEveryPath) {
  const CpuBackend best({.threads = 2});
  const Tensor w = random_f32({150, 77}, 30), b = random_f32({150}, 31);
  const PackedLinear p = PackedLinear::pack(best, w, &b, WeightFormat::kBF16);
  if (std::string(linear_isa(best.isa())) != "avx512bf16") {
    EXPECT_FALSE(p.blocked());
    GTEST_SKIP() << "this CPU has no AVX512-BF16: bf16 weights stay row-major";
  }
  ASSERT_TRUE(p.blocked());
  for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 16, 33, 130}) {
    const Tensor x = random_f32({n, 77}, 40 + static_cast<uint32_t>(n));
    expect_naive(x, p, linear(best, x, p), 1e-2, ("n = " + std::to_string(n)).c_str());
  }
  const CpuBackend portable({.threads = 1, .max_isa = Isa::kPortable});
  EXPECT_THROW(linear(portable, random_f32({1, 77}, 50), p), InvalidArgument);
}

// int8 weights packed for the GEMM alone (WeightPlacement::kGemmOnly: the encoders' int8
// blocks) are stored blocked where the CPU multiplies int8 on oneDNN. With `out` and `in` off
// the blocks' sizes, at row counts up to two GEMM tiles, the kQ8Row GEMM gives the same bits as
// on the row-major int8 weights (the same integers and scales, exact int32 sums: the blocked GEMM
// multiplies x as u8 = q + 128 and subtracts x_offset_sums, 128 x each channel's weight sum);
// weight() gives the row-major integers back; any other path is refused. (Before the u8 form,
// s8 x s8 on the blocked layout ran oneDNN's reference kernel on CPUs without AMX; the GEMM now
// refuses a reference kernel, so this test fails there instead of running 2,600x slower.)
TEST(Linear, BlockedInt8WeightsForTheGemm) {
  const CpuBackend best({.threads = 2});
  const Tensor w = random_f32({150, 77}, 60), b = random_f32({150}, 61);
  const PackedLinear rows = PackedLinear::pack(best, w, &b, WeightFormat::kInt8);
  const PackedLinear blk =
      PackedLinear::pack(best, w, &b, WeightFormat::kInt8, WeightPlacement::kGemmOnly);
  LinearOptions q8;
  q8.path = LinearPath::kGemm;
  q8.int8_gemm = Int8Gemm::kQ8Row;
  EXPECT_FALSE(rows.blocked());
  if (!linear_plan(best, 64, rows, q8).x_quantised_q8_row) {
    EXPECT_FALSE(blk.blocked());
    GTEST_SKIP() << "no int8 GEMM on this CPU: int8 weights stay row-major";
  }
  ASSERT_TRUE(blk.blocked());
  const Tensor wr = rows.weight(), wb = blk.weight();
  ASSERT_EQ(wb.dtype(), DType::kI8);
  EXPECT_EQ(std::memcmp(wr.raw(), wb.raw(), 150 * 77), 0);
  EXPECT_EQ(std::memcmp(rows.scales(), blk.scales(), 150 * sizeof(float)), 0);
  ASSERT_NE(blk.x_offset_sums(), nullptr);
  EXPECT_EQ(rows.x_offset_sums(), nullptr);
  for (int64_t o = 0; o < 150; ++o) {
    int32_t sum = 0;
    for (int64_t k = 0; k < 77; ++k) sum += wr.data<int8_t>()[o * 77 + k];
    EXPECT_EQ(blk.x_offset_sums()[o], 128 * sum) << "channel " << o;
  }
  for (int64_t n : {1, 5, 16, 33, 130, 600}) {
    const Tensor x = random_f32({n, 77}, 70 + static_cast<uint32_t>(n));
    const Tensor a = linear(best, x, rows, q8), c = linear(best, x, blk, q8);
    EXPECT_EQ(std::memcmp(a.raw(), c.raw(), static_cast<size_t>(n * 150) * 4), 0) << "n = " << n;
  }
  EXPECT_THROW(linear(best, random_f32({1, 77}, 80), blk), InvalidArgument);  // a gemv
  LinearOptions widened;  // int8 weight-only on the GEMM: x in bf16, the panels widened
  widened.path = LinearPath::kGemm;
  EXPECT_THROW(linear(best, random_f32({64, 77}, 81), blk, widened), InvalidArgument);
}

// LinearOptions::act and accumulate give what linear() followed by ops.h's quick_gelu / gelu_erf
// and add give, on every path and weight format: the same bits where `out` is a multiple of 16
// (every value through the vector kernels, as the encoders' widths are), within the scalar
// tail's rounding (relative 1e-5) otherwise. y's old values are what accumulate adds to.
TEST(Linear, ActivationAndResidualAddAsSeparateOpsDo) {
  const CpuBackend& be = be2();
  struct Way {
    const char* name;
    WeightFormat fmt;
    WeightPlacement place;
    LinearOptions opt;
  };
  std::vector<Way> ways;
  for (LinearPath path : {LinearPath::kGemv, LinearPath::kGemm}) {
    LinearOptions o;
    o.path = path;
    ways.push_back({"f32", WeightFormat::kF32, WeightPlacement::kCopy, o});
    ways.push_back({"bf16", WeightFormat::kBF16, WeightPlacement::kCopy, o});
    ways.push_back({"int8", WeightFormat::kInt8, WeightPlacement::kCopy, o});
  }
  LinearOptions blas;
  blas.path = LinearPath::kGemm;
  blas.f32_gemm = GemmLibrary::kOpenBlas;
  ways.push_back({"f32 openblas", WeightFormat::kF32, WeightPlacement::kCopy, blas});
  LinearOptions q8;
  q8.path = LinearPath::kGemm;
  q8.int8_gemm = Int8Gemm::kQ8Row;
  ways.push_back({"int8 q8 rows", WeightFormat::kInt8, WeightPlacement::kCopy, q8});
  ways.push_back({"int8 q8 rows, gemm only", WeightFormat::kInt8, WeightPlacement::kGemmOnly, q8});
  for (const int64_t out : {144, 150})
    for (const Way& way : ways) {
      const Tensor w = random_f32({out, 77}, 90), b = random_f32({out}, 91);
      const PackedLinear p = PackedLinear::pack(be, w, &b, way.fmt, way.place);
      for (const int64_t n : {3, 37, 600}) {
        const Tensor x = random_f32({n, 77}, 92 + static_cast<uint32_t>(n));
        const Tensor y0 = random_f32({n, out}, 93);
        const Tensor plain = linear(be, x, p, way.opt);
        for (const LinearAct act : {LinearAct::kNone, LinearAct::kQuickGelu, LinearAct::kGeluErf})
          for (const bool acc : {false, true}) {
            const int64_t cnt = n * out;
            std::vector<float> want(plain.data<float>(), plain.data<float>() + cnt);
            float* wp = want.data();
            if (act == LinearAct::kQuickGelu) quick_gelu(be, wp, wp, cnt);
            if (act == LinearAct::kGeluErf) gelu_erf(be, wp, wp, cnt);
            if (acc) {
              std::vector<float> sum(y0.data<float>(), y0.data<float>() + cnt);
              add(be, sum.data(), wp, cnt);
              want = sum;
              wp = want.data();
            }
            Tensor got = Tensor::empty(DType::kF32, {n, out});
            std::memcpy(got.raw(), y0.raw(), static_cast<size_t>(cnt) * 4);
            LinearOptions o = way.opt;
            o.act = act;
            o.accumulate = acc;
            linear(be, x.data<float>(), n, p, got.data<float>(), o);
            const std::string what = std::string(way.name) + ", out " + std::to_string(out) +
                                     ", n " + std::to_string(n) + ", act " +
                                     std::to_string(static_cast<int>(act)) + ", acc " +
                                     std::to_string(acc);
            const float* g = got.data<float>();
            const float* y0p = y0.data<float>();  // accumulate's cancellation: judged on |y0| too
            if (out % 16 == 0) {
              EXPECT_EQ(std::memcmp(g, wp, static_cast<size_t>(cnt) * 4), 0) << what;
              continue;
            }
            float worst = 0;
            for (int64_t i = 0; i < cnt; ++i)
              worst =
                  std::max(worst, std::fabs(g[i] - wp[i]) /
                                      (std::fabs(wp[i]) + (acc ? std::fabs(y0p[i]) : 0) + 1e-6f));
            EXPECT_LE(worst, 1e-5f) << what;
          }
      }
    }
}

TEST(Linear, RejectsBadInput) {
  const CpuBackend be({.threads = 1});
  const Tensor w = random_f32({4, 6}, 17);
  EXPECT_THROW(PackedLinear::pack(be2(), random_f32({4}, 1), nullptr, WeightFormat::kF32),
               InvalidArgument);
  EXPECT_THROW(
      PackedLinear::pack(be2(), Tensor::zeros(DType::kI32, {4, 6}), nullptr, WeightFormat::kF32),
      InvalidArgument);
  const Tensor bad_bias = random_f32({5}, 18);
  EXPECT_THROW(PackedLinear::pack(be2(), w, &bad_bias, WeightFormat::kF32), InvalidArgument);
  const Tensor other = random_f32({2, 7}, 19);
  const Tensor* ws[] = {&w, &other};
  EXPECT_THROW(PackedLinear::pack_concat(be2(), ws, {}, WeightFormat::kBF16), InvalidArgument);
  Tensor nan_w = w.clone();
  nan_w.data<float>()[3] = NAN;
  EXPECT_THROW(PackedLinear::pack(be2(), nan_w, nullptr, WeightFormat::kInt8), InvalidArgument);

  const PackedLinear p = PackedLinear::pack(be2(), w, nullptr, WeightFormat::kF32);
  std::vector<float> buf(64);
  EXPECT_THROW(linear(be, buf.data(), -1, p, buf.data() + 32), InvalidArgument);
  EXPECT_THROW(linear(be, buf.data(), 2, p, buf.data() + 4), InvalidArgument);  // overlap
  EXPECT_THROW(linear(be, buf.data(), 1, PackedLinear(), buf.data() + 32), InvalidArgument);
  EXPECT_THROW(linear(be, random_f32({2, 5}, 20), p), InvalidArgument);
  linear(be, buf.data(), 0, p, buf.data() + 32);  // n = 0 is a no-op
}

TEST(Bandwidth, MeasuresAPositiveRate) {
  const double gbs = measure_read_bandwidth_gbs(be2(), size_t{8} << 20, 2);
  EXPECT_TRUE(std::isfinite(gbs));
  EXPECT_GT(gbs, 0.0);
  EXPECT_THROW(measure_read_bandwidth_gbs(be2(), size_t{8} << 20, 0), InvalidArgument);
}

}  // namespace

// The encoders' per-row quantisation of x (Int8Gemm::kQ8Row): its integers must be exactly those
// of the correctly rounded division x / scale, rounded half to even (what the PyTorch reference
// computes), on values placed at halves, an ulp either side of them, and in random rows (a
// kernel that multiplied by 1 / scale instead fails here).
TEST(Quantize, RowsRoundAsTheDivisionDoes) {
  const auto& ks = kernels::detail::linear_kernels(Isa::kAvx512Bf16);
  if (!ks.quantize_rows_q8 || !cpu_features().avx512vnni) GTEST_SKIP() << "no AVX512-VNNI";
  constexpr int64_t k = 301;  // not a multiple of 16: the masked tail too
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x;
  int64_t rows = 0;
  for (float top : {127.f, 1.f, 3.3e-3f, 6.1e5f}) {
    const float s = top / 127.f;
    for (int variant = 0; variant < 4; ++variant, ++rows) {
      std::vector<float> r(static_cast<size_t>(k));
      r[0] = top;  // the row's largest magnitude sets the scale
      for (int64_t i = 1; i < k; ++i) {
        const float half = (static_cast<float>(i % 254) - 126.5f) * s;  // (j + 0.5) * s
        switch (variant) {
          case 0:
            r[static_cast<size_t>(i)] = half;
            break;
          case 1:
            r[static_cast<size_t>(i)] = std::nextafter(half, 1e30f);
            break;
          case 2:
            r[static_cast<size_t>(i)] = std::nextafter(half, -1e30f);
            break;
          default:
            r[static_cast<size_t>(i)] = nd(rng) * top / 4;
            break;
        }
        r[static_cast<size_t>(i)] = std::clamp(r[static_cast<size_t>(i)], -top, top);
      }
      x.insert(x.end(), r.begin(), r.end());
    }
  }
  std::vector<int8_t> q(static_cast<size_t>(rows * k)), qu(q.size());
  std::vector<float> scale(static_cast<size_t>(rows)), scale_u(scale.size());
  ks.quantize_rows_q8(x.data(), k, rows, k, q.data(), k, scale.data(), false);
  // The u8 form (the blocked GEMM's x): the same values + 128, the same scales.
  ks.quantize_rows_q8(x.data(), k, rows, k, qu.data(), k, scale_u.data(), true);
  ASSERT_EQ(scale, scale_u);
  for (size_t i = 0; i < q.size(); ++i)
    ASSERT_EQ(static_cast<int>(static_cast<uint8_t>(qu[i])), q[i] + 128) << "element " << i;
  for (int64_t j = 0; j < rows; ++j) {
    float top = 0;
    for (int64_t i = 0; i < k; ++i) top = std::max(top, std::fabs(x[j * k + i]));
    const float s = top / 127.f;
    ASSERT_EQ(scale[static_cast<size_t>(j)], s) << "row " << j;
    for (int64_t i = 0; i < k; ++i) {
      const float want = std::clamp(std::nearbyint(x[j * k + i] / s), -127.f, 127.f);
      ASSERT_EQ(q[static_cast<size_t>(j * k + i)], static_cast<int8_t>(want))
          << "row " << j << " col " << i << ": " << x[j * k + i] << " / " << s;
    }
  }
}
