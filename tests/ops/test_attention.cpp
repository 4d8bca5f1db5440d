// Attention over the paged KV cache and the contiguous varlen variant vs PyTorch
// softmax(q k^T * scale + dense mask) v computed in float64 (the dense mask exists only in the
// reference). Every ISA variant, block sizes 16 and 32 with shuffled block tables, f32 and bf16
// KV (the bf16 reference rounds k/v to bf16 first), automatic and forced kv splits.
// Tolerance: |err| <= 2e-5 + 2e-5 * |ref| (measured max error ~5e-6).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/convert.h"
#include "core/error.h"
#include "isa_fixture.h"
#include "kernels/attention.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/kv_cache.h"
#include "ref_suite.h"

using namespace mmrt;
using namespace mmrt::kernels;
using namespace mmrt::test;

namespace {

constexpr double kAtol = 2e-5, kRtol = 2e-5;

struct SeqSpec {
  int32_t n_q, kv_len;
  MaskKind kind = MaskKind::kCausal;
  std::vector<KvSpan> spans = {};
};

struct AttnSpec {
  std::string name;
  int32_t nh, nkv, hd;
  float q_scale;  // larger: peakier softmax
  std::vector<SeqSpec> seqs;
};

const std::vector<AttnSpec>& paged_specs() {
  static const std::vector<AttnSpec> s = {
      {"prefill_gqa6", 12, 2, 128, 1.0f, {{77, 77}}},
      {"decode_gqa6", 12, 2, 128, 1.0f, {{1, 1}, {1, 33}, {1, 300}, {1, 64}}},
      {"mixed_gqa2",
       4,
       2,
       64,
       1.0f,
       {{40, 40},
        {1, 129},
        {25, 90},  // a prefill chunk starting mid-sequence
        {1, 16},
        {70, 200, MaskKind::kCausal, {{20, 50}, {150, 190}}},
        {33, 33, MaskKind::kFull},
        {0, 10}}},
      {"mha_hd80",
       3,
       3,
       80,
       1.5f,
       {{50, 50, MaskKind::kFull}, {1, 45}, {20, 61, MaskKind::kCausal, {{41, 61}}}}},
      {"spans_gqa6",
       12,
       2,
       128,
       3.0f,
       {{60, 60, MaskKind::kCausal, {{0, 10}, {25, 45}}},
        {16, 80, MaskKind::kCausal, {{60, 80}}},
        {5, 200}}},
      // Groups of 4 and 8, head dims whose value tiles are tails only (48: 3 vectors, 32: 2).
      {"gqa4_hd48", 8, 2, 48, 1.0f, {{70, 150}, {1, 90}}},
      {"gqa8_hd32", 8, 1, 32, 2.0f, {{40, 40}, {9, 75}}},
  };
  return s;
}

// Contiguous (varlen) cases: every sequence is all-query (n_q == kv_len), one mask kind.
const std::vector<AttnSpec>& varlen_specs() {
  static const std::vector<AttnSpec> s = {
      {"varlen_full_hd80",
       4,
       4,
       80,
       1.0f,
       {{50, 50, MaskKind::kFull},
        {1, 1, MaskKind::kFull},
        {79, 79, MaskKind::kFull},
        {64, 64, MaskKind::kFull}}},
      {"varlen_causal_gqa2", 4, 2, 64, 2.0f, {{33, 33}, {70, 70}}},
      // A ViT's shape: segments longer than a query tile and not a multiple of the key padding.
      {"varlen_full_vit",
       2,
       2,
       80,
       1.0f,
       {{300, 300, MaskKind::kFull}, {130, 130, MaskKind::kFull}}},
      // Bidirectional with grouped heads and the largest head the tensor-core path takes.
      {"varlen_full_gqa_hd128",
       4,
       2,
       128,
       1.0f,
       {{70, 70, MaskKind::kFull}, {9, 9, MaskKind::kFull}}},
  };
  return s;
}

struct Data {
  std::vector<float> q, k, v;  // [total_q, nh, hd], [total_kv, nkv, hd] x2
  std::vector<int32_t> q_begin, kv_off;
  int32_t total_q = 0, total_kv = 0;
};

Data make_data(const AttnSpec& sp, uint32_t seed) {
  Data d;
  for (const auto& s : sp.seqs) {
    d.q_begin.push_back(d.total_q);
    d.kv_off.push_back(d.total_kv);
    d.total_q += s.n_q;
    d.total_kv += s.kv_len;
  }
  d.q = randn(size_t(d.total_q) * sp.nh * sp.hd, seed, sp.q_scale);
  d.k = randn(size_t(d.total_kv) * sp.nkv * sp.hd, seed + 1);
  d.v = randn(size_t(d.total_kv) * sp.nkv * sp.hd, seed + 2);
  return d;
}

std::string case_name(const AttnSpec& sp, bool bf16) {
  return sp.name + (bf16 ? "_bf16" : "_f32");
}

void add_cases(RefSuite& suite, const AttnSpec& sp, uint32_t seed, bool with_bf16) {
  Data d = make_data(sp, seed);
  for (bool bf16 : {false, true}) {
    if (bf16 && !with_bf16) continue;
    RefCase c;
    c.name = case_name(sp, bf16);
    c.op = "attention";
    nlohmann::json seqs = nlohmann::json::array();
    for (size_t i = 0; i < sp.seqs.size(); ++i) {
      const auto& s = sp.seqs[i];
      nlohmann::json spans = nlohmann::json::array();
      for (auto x : s.spans) spans.push_back({x.begin, x.end});
      seqs.push_back({{"q_begin", d.q_begin[i]},
                      {"n_q", s.n_q},
                      {"kv_len", s.kv_len},
                      {"kv_off", d.kv_off[i]},
                      {"kind", s.kind == MaskKind::kFull ? "full" : "causal"},
                      {"spans", spans}});
    }
    c.params = {{"n_heads", sp.nh},  {"n_kv_heads", sp.nkv},
                {"head_dim", sp.hd}, {"scale", 1.0 / std::sqrt(double(sp.hd))},
                {"bf16_kv", bf16},   {"seqs", seqs}};
    c.inputs["q"] = f32_array({d.total_q, sp.nh, sp.hd}, d.q);
    c.inputs["k"] = f32_array({d.total_kv, sp.nkv, sp.hd}, d.k);
    c.inputs["v"] = f32_array({d.total_kv, sp.nkv, sp.hd}, d.v);
    suite.add(std::move(c));
  }
}

[[maybe_unused]] const bool kReg = register_cases([](RefSuite& s) {
  uint32_t seed = 1000;
  for (const auto& sp : paged_specs()) add_cases(s, sp, seed += 10, true);
  for (const auto& sp : varlen_specs()) add_cases(s, sp, seed += 10, false);
});

// Fills a paged cache (layer 1 of 2) with the spec's K/V through shuffled block tables and runs
// paged_attention, every operand in the backend's memory. Slots past each sequence's end hold NaN
// to prove they are never used.
std::vector<float> run_paged(const kernels::Backend& be, const AttnSpec& sp, const Data& d,
                             int32_t bs, DType dt, int32_t kv_splits, bool bf16 = false) {
  int32_t blocks_needed = 0;
  for (const auto& s : sp.seqs) blocks_needed += (s.kv_len + bs - 1) / bs;
  KvCacheConfig cfg{.n_layers = 2,
                    .num_blocks = blocks_needed + 3,
                    .block_size = bs,
                    .n_kv_heads = sp.nkv,
                    .head_dim = sp.hd,
                    .dtype = dt};
  KvCache cache(be, cfg);
  std::vector<int32_t> perm(size_t(cfg.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(uint32_t(bs * 7 + sp.hd)));
  const int64_t row = int64_t(sp.nkv) * sp.hd;
  // Layer 0 gets unrelated values (layer offsets must be right).
  {
    std::vector<int32_t> all(size_t(cache.num_slots()));
    std::iota(all.begin(), all.end(), 0);
    const DeviceBuf junk(be, randn(all.size() * size_t(row), 5, 100.0f));
    cache.write(0, junk.get(), junk.get(), all.data(), int64_t(all.size()));
  }
  std::vector<std::vector<int32_t>> tables(sp.seqs.size());
  std::vector<AttnSeq> seqs;
  size_t next = 0;
  const DeviceBuf nan_row(be, size_t(row));  // NaN
  for (size_t i = 0; i < sp.seqs.size(); ++i) {
    const auto& s = sp.seqs[i];
    const int32_t nb = (s.kv_len + bs - 1) / bs;
    for (int32_t b = 0; b < nb; ++b) tables[i].push_back(perm[next++]);
    std::vector<int32_t> slots;
    for (int32_t t = 0; t < nb * bs; ++t) slots.push_back(tables[i][size_t(t / bs)] * bs + t % bs);
    // K and V interleaved in one buffer [kv_len, 2, nkv, hd] to exercise the row strides;
    // history first, then the new tokens, as an engine would.
    std::vector<float> kv(size_t(s.kv_len) * 2 * size_t(row));
    for (int32_t t = 0; t < s.kv_len; ++t) {
      const float* ks = d.k.data() + (size_t(d.kv_off[i]) + t) * size_t(row);
      const float* vs = d.v.data() + (size_t(d.kv_off[i]) + t) * size_t(row);
      std::copy(ks, ks + row, kv.begin() + int64_t(t) * 2 * row);
      std::copy(vs, vs + row, kv.begin() + int64_t(t) * 2 * row + row);
    }
    const int32_t hist = s.kv_len - s.n_q;
    const DeviceBuf kvd(be, kv);
    cache.write(1, kvd.get(), kvd.get() + row, slots.data(), hist, 2 * row, 2 * row);
    cache.write(1, kvd.get() + int64_t(hist) * 2 * row, kvd.get() + int64_t(hist) * 2 * row + row,
                slots.data() + hist, s.n_q, 2 * row, 2 * row);
    for (int32_t t = s.kv_len; t < nb * bs; ++t)
      cache.write(1, nan_row.get(), nan_row.get(), &slots[size_t(t)], 1);
    seqs.push_back(AttnSeq{.q_begin = d.q_begin[i],
                           .n_q = s.n_q,
                           .kv_len = s.kv_len,
                           .block_table = tables[i].data(),
                           .mask = MaskDesc{s.kind, std::span<const KvSpan>(s.spans)}});
  }
  const DeviceBuf q(be, d.q);
  DeviceBuf out(be, std::vector<float>(size_t(d.total_q) * sp.nh * sp.hd, -7.0f));
  PagedAttentionArgs a{.q = q.get(),
                       .out = out.get(),
                       .n_tokens = d.total_q,
                       .n_heads = sp.nh,
                       .kv_splits = kv_splits,
                       .bf16 = bf16};
  paged_attention(be, a, cache.layer(1), seqs);
  return out.host();
}

// Runs varlen_attention with q, k, v as views into one fused [n, (nh + 2 nkv) * hd] buffer.
std::vector<float> run_varlen(const kernels::Backend& be, const AttnSpec& sp, const Data& d,
                              int32_t kv_splits, bool bf16 = false) {
  const int64_t qrow = int64_t(sp.nh) * sp.hd, kvrow = int64_t(sp.nkv) * sp.hd;
  const int64_t stride = qrow + 2 * kvrow;
  std::vector<float> qkv(size_t(d.total_q) * size_t(stride));
  for (int32_t t = 0; t < d.total_q; ++t) {
    std::copy_n(d.q.data() + int64_t(t) * qrow, qrow, qkv.data() + t * stride);
    std::copy_n(d.k.data() + int64_t(t) * kvrow, kvrow, qkv.data() + t * stride + qrow);
    std::copy_n(d.v.data() + int64_t(t) * kvrow, kvrow, qkv.data() + t * stride + qrow + kvrow);
  }
  std::vector<int32_t> cu = {0};
  for (const auto& s : sp.seqs) cu.push_back(cu.back() + s.n_q);
  const DeviceBuf qkvd(be, qkv);
  DeviceBuf out(be, std::vector<float>(size_t(d.total_q) * size_t(qrow), -7.0f));
  VarlenAttentionArgs a{.q = qkvd.get(),
                        .k = qkvd.get() + qrow,
                        .v = qkvd.get() + qrow + kvrow,
                        .out = out.get(),
                        .q_stride = stride,
                        .k_stride = stride,
                        .v_stride = stride,
                        .cu_seqlens = cu,
                        .n_heads = sp.nh,
                        .n_kv_heads = sp.nkv,
                        .head_dim = sp.hd,
                        .mask = sp.seqs[0].kind,
                        .kv_splits = kv_splits,
                        .bf16 = bf16};
  varlen_attention(be, a);
  return out.host();
}

uint32_t spec_seed(const AttnSpec& sp) {
  uint32_t seed = 1000;
  for (const auto& x : paged_specs()) {
    seed += 10;
    if (x.name == sp.name) return seed;
  }
  for (const auto& x : varlen_specs()) {
    seed += 10;
    if (x.name == sp.name) return seed;
  }
  ADD_FAILURE() << "unknown spec " << sp.name;
  return 0;
}

// Every test below runs on every backend (isa_fixture.h).
class AttnDevice : public DeviceFixture {
 protected:
  AttnDevice() : DeviceFixture({Op::kPagedAttention, Op::kVarlenAttention, Op::kKvWrite}) {}
};

TEST_P(AttnDevice, PagedMatchesTorch) {
  for (const auto& sp : paged_specs()) {
    const Data d = make_data(sp, spec_seed(sp));
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const RefCase& c = RefSuite::get().at(case_name(sp, dt == DType::kBF16));
      for (int32_t bs : {16, 32}) {
        for (int32_t splits : {0, 3}) {
          auto out = run_paged(be(), sp, d, bs, dt, splits);
          const std::string what = sp.name + " bs " + std::to_string(bs) + " " +
                                   std::string(dtype_name(dt)) + " splits " +
                                   std::to_string(splits);
          expect_close(out.data(), c.out.f.data(), out.size(), kAtol, kRtol, what);
        }
      }
    }
  }
}

TEST_P(AttnDevice, VarlenMatchesTorch) {
  for (const auto& sp : varlen_specs()) {
    const Data d = make_data(sp, spec_seed(sp));
    const RefCase& c = RefSuite::get().at(case_name(sp, false));
    for (int32_t splits : {0, 2}) {
      auto out = run_varlen(be(), sp, d, splits);
      expect_close(out.data(), c.out.f.data(), out.size(), kAtol, kRtol,
                   sp.name + " splits " + std::to_string(splits));
    }
  }
}

// The encoders' bf16 permission (VarlenAttentionArgs::bf16) on every device: full masks within
// the rounding of q, k, the probabilities and v to bf16 against the float64 reference
// (1e-2 + 1e-2 |ref|, as on the CPU), a causal mask the exact kernel's bits. On a GPU the full
// masks run on tensor cores, so there they must differ from the exact kernel.
TEST_P(AttnDevice, VarlenBf16PermissionWithinItsRounding) {
  for (const auto& sp : varlen_specs()) {
    const Data d = make_data(sp, spec_seed(sp));
    const RefCase& c = RefSuite::get().at(case_name(sp, false));
    const auto exact = run_varlen(be(), sp, d, 0, false);
    const auto out = run_varlen(be(), sp, d, 0, true);
    if (sp.seqs[0].kind != MaskKind::kFull) {
      EXPECT_EQ(std::memcmp(out.data(), exact.data(), out.size() * 4), 0) << sp.name;
      continue;
    }
    expect_close(out.data(), c.out.f.data(), out.size(), 1e-2, 1e-2, sp.name + " bf16");
    if (std::string(GetParam()) == "cuda") {
      EXPECT_NE(std::memcmp(out.data(), exact.data(), out.size() * 4), 0)
          << sp.name << ": the tensor-core path did not run";
    }
  }
}

TEST_P(AttnDevice, PagedAndContiguousAreIdentical) {
  for (const auto& sp : varlen_specs()) {
    const Data d = make_data(sp, spec_seed(sp));
    for (int32_t splits : {0, 2}) {
      auto contiguous = run_varlen(be(), sp, d, splits);
      for (int32_t bs : {16, 32}) {
        auto paged = run_paged(be(), sp, d, bs, DType::kF32, splits);
        ASSERT_EQ(paged.size(), contiguous.size());
        EXPECT_EQ(std::memcmp(paged.data(), contiguous.data(), paged.size() * 4), 0)
            << sp.name << " bs " << bs << " splits " << splits;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Device, AttnDevice, ::testing::ValuesIn(kDevices), isa_param_name);

// The encoders' attention in bf16 products (VarlenAttentionArgs::bf16; the CPU's GEMM path on
// AVX512-BF16): against the float64 reference on the f32 inputs, within the rounding of q, k,
// the probabilities and v to bf16 (8 bits each: |err| <= 1e-2 + 1e-2 |ref| on these unit-scale
// values). It must round (differ from the exact kernel), and asked of a causal mask or where the
// CPU has no AVX512-BF16 it must be the exact kernel.
TEST(Attention, VarlenBf16WithinItsRounding) {
  if (!isa_supported(Isa::kAvx512Bf16)) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  const kernels::CpuBackend bf(kernels::BackendOptions{.threads = 2, .max_isa = Isa::kAvx512Bf16});
  const kernels::CpuBackend avx512(kernels::BackendOptions{.threads = 2, .max_isa = Isa::kAvx512});
  for (const auto& sp : varlen_specs()) {
    const Data d = make_data(sp, spec_seed(sp));
    const RefCase& c = RefSuite::get().at(case_name(sp, false));
    const auto exact = run_varlen(bf, sp, d, 0, false);
    const auto out = run_varlen(bf, sp, d, 0, true);
    if (sp.seqs[0].kind != MaskKind::kFull) {
      EXPECT_EQ(std::memcmp(out.data(), exact.data(), out.size() * 4), 0) << sp.name;
      continue;
    }
    expect_close(out.data(), c.out.f.data(), out.size(), 1e-2, 1e-2, sp.name + " bf16");
    if (sp.nh == sp.nkv) {  // the CPU's bf16 path takes no grouped heads
      EXPECT_NE(std::memcmp(out.data(), exact.data(), out.size() * 4), 0)
          << sp.name << ": the bf16 path did not run";
    }
    const auto capped = run_varlen(avx512, sp, d, 0, true);
    EXPECT_EQ(
        std::memcmp(capped.data(), run_varlen(avx512, sp, d, 0, false).data(), out.size() * 4), 0)
        << sp.name << ": without AVX512-BF16 the exact kernel";
  }
}

// The 16-bit models' permission for prefill rows (PagedAttentionArgs::bf16; the CPU's bf16
// products on AVX512-BF16), with a bf16 cache, every block size and split:
// - against PyTorch's float64 attention on the bf16-rounded keys and values, within the
//   rounding of q and the probabilities: |err| <= 1e-2 q_scale (1 + |ref|) (the encoders'
//   permission allows 1e-2 at unit-scale q; the q rounding's error in the scores grows with q);
// - against bf16_products_reference (the same roundings, float64 elsewhere; without kv splits,
//   whose parts restart the running maximum): 95 % of the values within 1e-5 (1 + |ref|), the
//   rest within 4e-3 (1 + |ref|) — a probability or q element whose f32 value lies within the
//   polynomial exp's or the sums' error of a bf16 rounding boundary rounds the other way (one
//   weight off by 2^-8; measured: 0.4-2.1 % of the values beyond 1e-5, at most 1.3e-3), while
//   the probabilities summed unrounded put 56-79 % of them beyond.
// It must round the rows of sequences with more than one query (differ from the exact kernel
// there) and leave decode rows, f32 caches and CPUs without AVX512-BF16 to the exact kernel
// (same bits). A batch-invariant backend rounds every row, decode rows too: a prefill row's
// bits equal the same query decoded alone (and its decode rows differ from the exact kernel's).
// bf16 rounding to nearest, ties to even, back in f32.
float bf16_round(float x) {
  return bf16_to_f32_scalar(f32_to_bf16_scalar(x));
}

// The bf16 products' arithmetic in float64, rounding where the kernel rounds: the scores of
// bf16(q * scale) and the bf16 keys; keys in chunks of 64 from position 0, each chunk's
// probabilities exp(s - m) rounded to bf16 against the running maximum m of the keys seen so
// far, the sum and the output rescaled by exp(m_old - m) as m grows (the online softmax, on bf16
// values). Rows of sequences with a single query: the exact kernel's arithmetic (no rounding of
// q or the probabilities). What remains between it and the kernel: f32 sums and exp.
std::vector<double> bf16_products_reference(const AttnSpec& sp, const Data& d) {
  const int G = sp.nh / sp.nkv, hd = sp.hd;
  const float scale = 1.0f / std::sqrt(float(hd));  // the dispatcher's
  std::vector<double> out(size_t(d.total_q) * sp.nh * hd, 0.0);
  for (size_t i = 0; i < sp.seqs.size(); ++i) {
    const SeqSpec& s = sp.seqs[i];
    const bool rounds = s.n_q > 1;
    for (int32_t j = 0; j < s.n_q; ++j) {
      int32_t lim = 0;
      kernels::detail::query_key_limits(s.kind, s.spans, s.kv_len, s.n_q, j, 1, &lim);
      for (int h = 0; h < sp.nh; ++h) {
        const float* q = d.q.data() + (size_t(d.q_begin[i] + j) * sp.nh + h) * hd;
        double* o = out.data() + (size_t(d.q_begin[i] + j) * sp.nh + h) * hd;
        double m = -std::numeric_limits<double>::infinity(), l = 0.0;
        for (int32_t t0 = 0; t0 < lim; t0 += 64) {
          const int32_t t1 = std::min(lim, t0 + 64);
          std::vector<double> sc;
          double m_new = m;
          for (int32_t t = t0; t < t1; ++t) {
            const float* k = d.k.data() + (size_t(d.kv_off[i] + t) * sp.nkv + h / G) * hd;
            double acc = 0.0;
            for (int x = 0; x < hd; ++x) {
              const float qs = q[x] * scale;  // in f32, as the kernel scales
              acc += double(rounds ? bf16_round(qs) : qs) * bf16_round(k[x]);
            }
            sc.push_back(acc);
            m_new = std::max(m_new, acc);
          }
          const double corr = std::exp(m - m_new);
          l *= corr;
          for (int x = 0; x < hd; ++x) o[x] *= corr;
          for (int32_t t = t0; t < t1; ++t) {
            double p = std::exp(sc[size_t(t - t0)] - m_new);
            if (rounds) p = bf16_round(float(p));
            l += p;
            const float* v = d.v.data() + (size_t(d.kv_off[i] + t) * sp.nkv + h / G) * hd;
            for (int x = 0; x < hd; ++x) o[x] += p * bf16_round(v[x]);
          }
          m = m_new;
        }
        for (int x = 0; x < hd; ++x) o[x] /= l;
      }
    }
  }
  return out;
}

TEST(Attention, PagedBf16ProductsWithinTheirRounding) {
  if (!isa_supported(Isa::kAvx512Bf16)) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  const kernels::CpuBackend bf(kernels::BackendOptions{.threads = 3, .max_isa = Isa::kAvx512Bf16});
  const kernels::CpuBackend avx512(kernels::BackendOptions{.threads = 3, .max_isa = Isa::kAvx512});
  const kernels::CpuBackend inv(
      kernels::BackendOptions{.threads = 3, .max_isa = Isa::kAvx512Bf16, .batch_invariant = true});
  for (const auto& sp : paged_specs()) {
    const Data d = make_data(sp, spec_seed(sp));
    const RefCase& c = RefSuite::get().at(case_name(sp, true));
    const int64_t qrow = int64_t(sp.nh) * sp.hd;
    const std::vector<double> rq = bf16_products_reference(sp, d);
    for (int32_t bs : {16, 32}) {
      for (int32_t splits : {1, 3}) {  // 1: no split, whatever the thread count
        const std::string what =
            sp.name + " bs " + std::to_string(bs) + " splits " + std::to_string(splits);
        const auto exact = run_paged(bf, sp, d, bs, DType::kBF16, splits);
        const auto out = run_paged(bf, sp, d, bs, DType::kBF16, splits, true);
        expect_close(out.data(), c.out.f.data(), out.size(), 1e-2 * sp.q_scale, 1e-2 * sp.q_scale,
                     what);
        if (splits == 1) {  // the emulation's chunks: every row's keys from position 0 on
          int64_t beyond = 0;
          for (size_t x = 0; x < out.size(); ++x) {
            const double e = std::abs(out[x] - rq[x]), scale = 1.0 + std::abs(rq[x]);
            EXPECT_LE(e, 4e-3 * scale) << what << "[" << x << "]";
            beyond += e > 1e-5 * scale;
          }
          EXPECT_LE(double(beyond), 0.05 * double(out.size())) << what;
        }
        for (size_t i = 0; i < sp.seqs.size(); ++i) {
          const int32_t nq = sp.seqs[i].n_q;
          if (nq == 0) continue;
          const size_t off = size_t(d.q_begin[i]) * size_t(qrow), bytes = size_t(nq * qrow) * 4;
          const bool same = std::memcmp(out.data() + off, exact.data() + off, bytes) == 0;
          if (nq == 1) {
            EXPECT_TRUE(same) << what << " seq " << i << ": a decode row keeps the exact kernel";
          } else {
            EXPECT_FALSE(same) << what << " seq " << i << ": the bf16 products did not run";
          }
        }
        const auto kept = run_paged(avx512, sp, d, bs, DType::kBF16, splits, true);
        EXPECT_EQ(
            std::memcmp(kept.data(), run_paged(avx512, sp, d, bs, DType::kBF16, splits).data(),
                        kept.size() * 4),
            0)
            << what << ": without AVX512-BF16 the exact kernel";
        // Batch invariant: every row in bf16 products, each as if decoded alone.
        const auto all = run_paged(inv, sp, d, bs, DType::kBF16, splits, true);
        const auto all_exact = run_paged(inv, sp, d, bs, DType::kBF16, splits);
        for (size_t i = 0; i < sp.seqs.size(); ++i) {
          const SeqSpec& q = sp.seqs[i];
          if (q.n_q == 0) continue;
          const size_t off = size_t(d.q_begin[i]) * size_t(qrow);
          if (q.kv_len > 1) {  // one key: a weight of exactly 1 either way
            EXPECT_NE(
                std::memcmp(all.data() + off, all_exact.data() + off, size_t(q.n_q * qrow) * 4), 0)
                << what << " seq " << i << ": batch invariant, every row in bf16 products";
          }
          for (int32_t t : {0, q.n_q - 1}) {  // its first and last query, alone over what it sees
            int32_t kv = 0;
            kernels::detail::query_key_limits(q.kind, q.spans, q.kv_len, q.n_q, t, 1, &kv);
            const AttnSpec one{"one", sp.nh, sp.nkv, sp.hd, sp.q_scale, {{1, kv}}};
            Data e;
            const size_t kvrow = size_t(sp.nkv) * size_t(sp.hd);
            const auto qi = d.q.begin() + int64_t(off + size_t(t) * size_t(qrow));
            e.q.assign(qi, qi + qrow);
            const auto k0 = int64_t(size_t(d.kv_off[i]) * kvrow);
            e.k.assign(d.k.begin() + k0, d.k.begin() + k0 + int64_t(size_t(kv) * kvrow));
            e.v.assign(d.v.begin() + k0, d.v.begin() + k0 + int64_t(size_t(kv) * kvrow));
            e.q_begin = {0};
            e.kv_off = {0};
            e.total_q = 1;
            e.total_kv = kv;
            const auto alone = run_paged(inv, one, e, bs, DType::kBF16, splits, true);
            EXPECT_EQ(std::memcmp(alone.data(), all.data() + off + size_t(t) * size_t(qrow),
                                  size_t(qrow) * 4),
                      0)
                << what << " seq " << i << " row " << t << ": a prefill row equals its decode";
          }
        }
        const auto f32 = run_paged(bf, sp, d, bs, DType::kF32, splits, true);
        EXPECT_EQ(std::memcmp(f32.data(), run_paged(bf, sp, d, bs, DType::kF32, splits).data(),
                              f32.size() * 4),
                  0)
            << what << ": an f32 cache keeps the exact kernel";
      }
    }
  }
}

// The CPU backend's threads split the work; the result must not depend on how.
class AttnIsa : public IsaFixture {};

TEST_P(AttnIsa, ThreadCountDoesNotChangeResults) {
  const AttnSpec& sp = paged_specs()[2];  // mixed batch
  const Data d = make_data(sp, spec_seed(sp));
  const kernels::BackendOptions o{.max_isa = be().isa()};
  const kernels::CpuBackend one({.threads = 1, .max_isa = o.max_isa}),
      three({.threads = 3, .max_isa = o.max_isa});
  auto a = run_paged(one, sp, d, 16, DType::kBF16, 2);
  auto b = run_paged(three, sp, d, 16, DType::kBF16, 2);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

// Batch invariance (BackendOptions::batch_invariant): a query row of a prefill chunk is the same
// bits as the same query decoded alone over the same keys, f32 and bf16 KV, on 4 threads (where
// a lone decode would otherwise split its keys). Without it, the split decode differs.
TEST_P(AttnIsa, BatchInvariantRowOfAChunkEqualsItsDecode) {
  const AttnSpec chunk{"chunk", 12, 2, 128, 1.0f, {{60, 1300}}};  // long: a decode splits
  const Data d = make_data(chunk, 77);
  const int64_t qrow = 12 * 128, kvrow = 2 * 128;
  const kernels::CpuBackend inv({.threads = 4, .max_isa = be().isa(), .batch_invariant = true}),
      plain({.threads = 4, .max_isa = be().isa()});
  int differ_without = 0;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const std::vector<float> full_inv = run_paged(inv, chunk, d, 16, dt, 0);
    const std::vector<float> full_plain = run_paged(plain, chunk, d, 16, dt, 0);
    for (int32_t t : {0, 10, 59}) {
      const int32_t kv = 1240 + t + 1;  // the keys row t sees
      const AttnSpec one{"one", 12, 2, 128, 1.0f, {{1, kv}}};
      Data e;
      e.q.assign(d.q.begin() + t * qrow, d.q.begin() + (t + 1) * qrow);
      e.k.assign(d.k.begin(), d.k.begin() + kv * kvrow);
      e.v.assign(d.v.begin(), d.v.begin() + kv * kvrow);
      e.q_begin = {0};
      e.kv_off = {0};
      e.total_q = 1;
      e.total_kv = kv;
      const std::vector<float> alone = run_paged(inv, one, e, 16, dt, 0);
      EXPECT_EQ(std::memcmp(alone.data(), full_inv.data() + t * qrow, qrow * 4), 0)
          << dtype_name(dt) << " row " << t;
      const std::vector<float> split = run_paged(plain, one, e, 16, dt, 0);
      differ_without += std::memcmp(split.data(), full_plain.data() + t * qrow, qrow * 4) != 0;
    }
  }
  EXPECT_GT(differ_without, 0) << "a split decode must differ somewhere from its chunk's row";
}

INSTANTIATE_TEST_SUITE_P(Isa, AttnIsa, ::testing::ValuesIn(kIsas), isa_param_name);

TEST(Attention, InvalidArgumentsThrow) {
  KvCache cache(be(), {.n_layers = 1,
                       .num_blocks = 4,
                       .block_size = 16,
                       .n_kv_heads = 2,
                       .head_dim = 64,
                       .dtype = DType::kF32});
  std::vector<float> q(4 * 4 * 64), out(q.size());
  const int32_t table[] = {0, 1, 9};
  PagedAttentionArgs a{.q = q.data(), .out = out.data(), .n_tokens = 4, .n_heads = 4};
  auto run = [&](AttnSeq s) {
    paged_attention(be(), a, cache.layer(0), std::span<const AttnSeq>(&s, 1));
  };
  EXPECT_NO_THROW(run({.q_begin = 0, .n_q = 4, .kv_len = 20, .block_table = table}));
  EXPECT_THROW(run({.q_begin = 0, .n_q = 4, .kv_len = 40, .block_table = table}),
               InvalidArgument);  // block id 9 out of range
  EXPECT_THROW(run({.q_begin = 0, .n_q = 4, .kv_len = 3, .block_table = table}), InvalidArgument);
  EXPECT_THROW(run({.q_begin = 2, .n_q = 4, .kv_len = 20, .block_table = table}), InvalidArgument);
  EXPECT_THROW(run({.q_begin = 0, .n_q = 4, .kv_len = 20, .block_table = nullptr}),
               InvalidArgument);
  const KvSpan unsorted[] = {{10, 12}, {5, 8}};
  EXPECT_THROW(run({.q_begin = 0,
                    .n_q = 4,
                    .kv_len = 20,
                    .block_table = table,
                    .mask = {MaskKind::kCausal, unsorted}}),
               InvalidArgument);
  const KvSpan empty[] = {{3, 3}};
  EXPECT_THROW(run({.q_begin = 0,
                    .n_q = 4,
                    .kv_len = 20,
                    .block_table = table,
                    .mask = {MaskKind::kCausal, empty}}),
               InvalidArgument);
  a.n_heads = 3;  // not a multiple of 2 kv heads
  EXPECT_THROW(run({.q_begin = 0, .n_q = 1, .kv_len = 1, .block_table = table}), InvalidArgument);
  const int32_t cu_bad[] = {0, 5, 3};
  VarlenAttentionArgs v{.q = q.data(),
                        .k = q.data(),
                        .v = q.data(),
                        .out = out.data(),
                        .cu_seqlens = cu_bad,
                        .n_heads = 2,
                        .n_kv_heads = 2,
                        .head_dim = 64};
  EXPECT_THROW(varlen_attention(be(), v), InvalidArgument);
  v.head_dim = 72;
  const int32_t cu_ok[] = {0, 2};
  v.cu_seqlens = cu_ok;
  EXPECT_THROW(varlen_attention(be(), v), InvalidArgument);
}

}  // namespace
