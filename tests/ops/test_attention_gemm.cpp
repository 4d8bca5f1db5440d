// The element-wise kernels of the encoders' GEMM attention (attention_gemm_avx512bf16.cpp)
// against double-precision arithmetic: the row softmax's probabilities, with its own fast exp,
// must round as bf16(exp(s - max)) does, and its sums must be the sums of what it wrote. And the
// int8 scores (VarlenAttentionArgs::int8_scores) against the same quantisation in double.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/convert.h"
#include "core/error.h"
#include "core/isa.h"
#include "kernels/attention.h"
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/cpu_backend.h"

namespace mmrt {
namespace {

TEST(AttentionGemm, SoftmaxRoundsAsExactExpDoes) {
  if (!isa_supported(Isa::kAvx512Bf16)) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  constexpr int kRows = 40, kLen = 1000, kLenp = 1024;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 6.f);  // scores spread over ~2^-60 .. 1 after exp
  std::vector<float> s(size_t(kRows) * kLenp);
  for (auto& v : s) v = nd(rng);
  // Edge rows: a masked key (-inf), keys far below the max (exp underflows to zero).
  s[0] = -std::numeric_limits<float>::infinity();
  s[kLenp + 3] = 200.f;
  std::vector<uint16_t> p(s.size(), 0xffff);  // poisoned
  std::vector<float> sums(kRows, -1.f);
  kernels::detail::softmax_rows_bf16(s.data(), kRows, kLen, kLenp, p.data(), sums.data());

  int64_t differ = 0, n = 0;
  for (int r = 0; r < kRows; ++r) {
    const float* sr = s.data() + size_t(r) * kLenp;
    double mx = -INFINITY;
    for (int c = 0; c < kLen; ++c) mx = std::max(mx, double(sr[c]));
    double sum = 0;
    for (int c = 0; c < kLenp; ++c) {
      const uint16_t got = p[size_t(r) * kLenp + c];
      if (c >= kLen) {
        ASSERT_EQ(got, 0) << "row " << r << " padding key " << c;
        continue;
      }
      const double e = std::exp(double(sr[c]) - mx);
      const float gotf = bf16_to_f32_scalar(got);
      sum += gotf;
      // bf16 keeps 8 significant bits: rounding is within half a unit, 2^-8 of the value at
      // most, the exp's own error (< 3e-6) on top; below 2^-126 the conversion flushes to zero.
      if (e < 0x1p-126) {
        EXPECT_EQ(gotf, 0.f) << "row " << r << " key " << c;
        continue;
      }
      EXPECT_LE(std::abs(gotf / e - 1), 0x1p-8 + 4e-6) << "row " << r << " key " << c;
      differ += got != f32_to_bf16_scalar(float(e));
      ++n;
    }
    EXPECT_NEAR(sums[size_t(r)], sum, 1e-6 * sum) << "row " << r;
  }
  // Values that round the other way than bf16 of the exact exp: 13 of 39,000 here (0.03 %); an
  // exp off by 6e-5 at most (one coefficient 2.5e-4 off) gives 168 (0.43 %).
  EXPECT_LT(double(differ), 0.001 * double(n)) << differ << " of " << n;
  EXPECT_EQ(p[0], 0) << "a masked (-inf) score has probability zero";
}

// Symmetric int8 of one row as the kernels quantise it: scale = max|x| / 127 (f32), q =
// round-half-even(x / scale) (the f32 division), clamped to +-127.
float quantise(const float* x, int n, int32_t* q) {
  float top = 0.f;
  for (int i = 0; i < n; ++i) top = std::max(top, std::abs(x[i]));
  const float scale = top / 127.f;
  for (int i = 0; i < n; ++i)
    q[i] = scale > 0.f ? std::clamp(int32_t(std::nearbyint(x[i] / scale)), -127, 127) : 0;
  return scale;
}

// VarlenAttentionArgs::int8_scores on the CPU (AVX512-VNNI and AVX512-BF16 without AMX), three
// segments (lengths 100, 37 and 250: padded keys in each), 3 heads of 80 and 2 of 64 dims, keys
// with a common offset (what the mean subtraction is for): against the same quantisation in
// double (q and k - mean per row and head, exact integer sums, P and v rounded to bf16, divided
// by the sum of the rounded P). What may differ is float rounding: the softmax's exp (< 3e-6)
// moving a probability across a bf16 rounding boundary now and then, the f32 products of the
// scales. The quantisation's own effect (against exact attention) must be far larger.
TEST(AttentionGemm, Int8ScoresAreTheQuantisedProducts) {
  const kernels::CpuBackend be(kernels::BackendOptions{.threads = 2});
  if (!kernels::varlen_int8_scores_supported(be))
    GTEST_SKIP() << "no int8 attention scores on this CPU (AVX512-VNNI and -BF16, no AMX)";
  const std::vector<int32_t> cu = {0, 100, 137, 387};
  for (const int hd : {80, 64}) {
    const int H = hd == 80 ? 3 : 2, E = H * hd, n = cu.back();
    std::mt19937 rng(static_cast<uint32_t>(hd));
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> qkv(size_t(n) * 3 * E), out(size_t(n) * E, -7.f);
    for (int t = 0; t < n; ++t)
      for (int c = 0; c < 3 * E; ++c)  // keys: N(0, 1) plus an offset of 3 per column
        qkv[size_t(t) * 3 * E + c] = nd(rng) + (c >= E && c < 2 * E ? 3.f * float(c % 7) / 7 : 0.f);
    kernels::VarlenAttentionArgs a{.q = qkv.data(),
                                   .k = qkv.data() + E,
                                   .v = qkv.data() + 2 * E,
                                   .out = out.data(),
                                   .q_stride = 3 * E,
                                   .k_stride = 3 * E,
                                   .v_stride = 3 * E,
                                   .cu_seqlens = cu,
                                   .n_heads = H,
                                   .n_kv_heads = H,
                                   .head_dim = hd,
                                   .int8_scores = true};
    kernels::varlen_attention(be, a);
    // The bf16 path's output (the int8 blocks' attention before), for the size of each
    // quantisation against exact attention.
    std::vector<float> out16(out.size());
    kernels::VarlenAttentionArgs a16 = a;
    a16.int8_scores = false;
    a16.bf16 = true;
    a16.out = out16.data();
    kernels::varlen_attention(be, a16);
    const float scale = 1.f / std::sqrt(float(hd));
    double worst = 0, worst_exact = 0, worst_bf16 = 0;
    for (size_t s = 0; s + 1 < cu.size(); ++s) {
      const int r0 = cu[s], len = cu[s + 1] - r0;
      std::vector<float> mean(static_cast<size_t>(E));
      for (int c = 0; c < E; ++c) {
        double acc = 0;
        for (int t = 0; t < len; ++t) acc += qkv[size_t(r0 + t) * 3 * E + E + c];
        mean[size_t(c)] = float(acc / len);
      }
      for (int h = 0; h < H; ++h) {
        std::vector<int32_t> kq(static_cast<size_t>(len * hd)), qq(static_cast<size_t>(hd));
        std::vector<float> ks(static_cast<size_t>(len)), kc(static_cast<size_t>(hd));
        for (int t = 0; t < len; ++t) {
          for (int d = 0; d < hd; ++d)
            kc[size_t(d)] = qkv[size_t(r0 + t) * 3 * E + E + h * hd + d] - mean[size_t(h * hd + d)];
          ks[size_t(t)] = quantise(kc.data(), hd, kq.data() + size_t(t) * hd);
        }
        for (int i = 0; i < len; ++i) {
          const float* qrow = qkv.data() + size_t(r0 + i) * 3 * E + h * hd;
          const double qs = quantise(qrow, hd, qq.data());
          std::vector<double> sq(static_cast<size_t>(len)), se(static_cast<size_t>(len));
          double mq = -INFINITY, me = -INFINITY;
          for (int j = 0; j < len; ++j) {
            int64_t dot = 0;
            double exact = 0;
            for (int d = 0; d < hd; ++d) {
              dot += int64_t(qq[size_t(d)]) * kq[size_t(j) * hd + size_t(d)];
              exact += double(qrow[d]) * qkv[size_t(r0 + j) * 3 * E + E + h * hd + d];
            }
            sq[size_t(j)] = double(dot) * qs * ks[size_t(j)] * scale;
            se[size_t(j)] = exact * scale;
            mq = std::max(mq, sq[size_t(j)]);
            me = std::max(me, se[size_t(j)]);
          }
          for (int d = 0; d < hd; ++d) {
            double num = 0, den = 0, ne = 0, de = 0;
            for (int j = 0; j < len; ++j) {
              const float v = qkv[size_t(r0 + j) * 3 * E + 2 * E + h * hd + d];
              const double p =
                  bf16_to_f32_scalar(f32_to_bf16_scalar(float(std::exp(sq[size_t(j)] - mq))));
              num += p * bf16_to_f32_scalar(f32_to_bf16_scalar(v));
              den += p;
              const double pe = std::exp(se[size_t(j)] - me);
              ne += pe * v;
              de += pe;
            }
            const double got = out[size_t(r0 + i) * E + size_t(h * hd + d)];
            worst = std::max(worst, std::abs(got - num / den));
            worst_exact = std::max(worst_exact, std::abs(got - ne / de));
            worst_bf16 = std::max(
                worst_bf16, std::abs(out16[size_t(r0 + i) * E + size_t(h * hd + d)] - ne / de));
          }
        }
      }
    }
    std::printf(
        "hd %d: int8 scores %.2e from the quantised reference, %.2e from exact attention (bf16 "
        "scores %.2e)\n",
        hd, worst, worst_exact, worst_bf16);
    EXPECT_LE(worst, 2e-3) << "hd " << hd;
    EXPECT_GE(worst_exact, 10 * worst) << "hd " << hd << ": the scores were not quantised";
    // The int8 scores' own error stays of the bf16 path's order (measured, hd 80 and 64:
    // 1.4e-2 and 1.5e-2 against 6.9e-3 and 4.8e-3 on these unit-scale inputs).
    EXPECT_LE(worst_exact, 4 * worst_bf16) << "hd " << hd;
    // Not for causal masks.
    a.mask = kernels::MaskKind::kCausal;
    EXPECT_THROW(kernels::varlen_attention(be, a), InvalidArgument);
  }
}

}  // namespace
}  // namespace mmrt
