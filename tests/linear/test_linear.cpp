// linear() against PyTorch (tests/reference/linear_ref.py, float64) on every backend: every CPU
// kernel variant this CPU supports and every device present (tests/ops/isa_fixture.h), every
// weight format, both paths (matrix-vector and GEMM) and both f32 GEMM libraries (options the CPU
// backend follows; a device takes its own path and says which in its LinearPlan), on awkward
// sizes, with x and y in the backend's memory.
//
// Tolerances, with mag = |x|.|W|^T + |b| per output (the size of the sum being formed):
//   f32 weights, bf16 weights with f32 x, int8 weights with f32 x:
//       |y - ref| <= 1e-5 * mag, ref on the stored (bf16-rounded / dequantised) weights;
//   GEMM that rounds x to bf16 (AVX512-BF16): |y - ref(bf16 x, stored W)| <= 1e-5 * mag and
//       |y - ref(f32 x, unrounded W)| <= 1e-2 * mag (bf16 roundings of x and W bound the error
//       by ~4e-3 * mag); for int8 the second reference is f32 x on the dequantised weights.
//   int8 decode on Q8 blocks of x: |y - ref(q8 x, stored W)| <= 1e-5 * mag, and against f32 x
//       |y - ref(f32 x, stored W)| <= 1.001 * bound + 1e-5 * mag, bound = |W| . (amax_block / 254)
//       (each element of x moves by at most half its block's step when quantised).
//   int8 GEMM on x quantised per row (Int8Gemm::kQ8Row): the same two checks with the row's
//       quantisation (ref(q8row x, stored W), bound = |W| . (amax_row / 254)).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../ops/isa_fixture.h"
#include "core/cpu.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/linear.h"
#include "kernels/registry.h"

namespace fs = std::filesystem;
using namespace mmrt;
using namespace mmrt::kernels;

namespace {

struct Case {
  int64_t n = 0, in = 0, out = 0;
  bool bias = false;
  std::vector<float> x, w, b;  // [n, in], [out, in], [out]
  // Reference outputs [n, out] (float64) and the torch quantisation of W.
  std::vector<double> y_f32, y_bf16w, y_bf16, y_i8, y_i8_xbf16, y_i8_xq8, q8_bound, y_i8_xrow,
      row_bound, mag;
  std::vector<int8_t> q;     // [out, in]
  std::vector<float> scale;  // [out]
  // FP8 E4M3 weights: bf16(x) against them, their codes and per-row scales.
  std::vector<double> y_fp8;
  std::vector<uint8_t> q_fp8;
  std::vector<float> scale_fp8;
};

std::vector<Case> make_cases() {
  std::vector<Case> cs;
  std::mt19937 rng(20240611);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(-2.f, 1.f);
  const int64_t ns[] = {1, 2, 3, 7, 8, 16, 33, 128};
  const std::pair<int64_t, int64_t> small[] = {{1, 1}, {1, 5}, {17, 1}, {17, 259}, {1536, 5}};
  auto add = [&](int64_t n, int64_t in, int64_t out, bool bias) {
    Case c;
    c.n = n;
    c.in = in;
    c.out = out;
    c.bias = bias;
    c.x.resize(static_cast<size_t>(n * in));
    for (auto& v : c.x) v = nd(rng);
    // One all-zero block of 64 in row 0 (the Q8 path's zero scale).
    if (in >= 128) std::fill(c.x.begin() + 64, c.x.begin() + 128, 0.f);
    c.w.resize(static_cast<size_t>(out * in));
    for (int64_t o = 0; o < out; ++o) {
      // Rows of very different magnitude (per-channel scales matter); row 1 all zero.
      const float row_scale = std::pow(10.f, ud(rng));
      for (int64_t k = 0; k < in; ++k)
        c.w[static_cast<size_t>(o * in + k)] = (o == 1 && out > 1) ? 0.f : nd(rng) * row_scale;
    }
    if (bias) {
      c.b.resize(static_cast<size_t>(out));
      for (auto& v : c.b) v = nd(rng);
    }
    cs.push_back(std::move(c));
  };
  bool bias = false;
  for (int64_t n : ns)
    for (auto [in, out] : small) add(n, in, out, bias = !bias);
  for (int64_t n : {1, 8, 16, 33}) add(n, 1536, 259, bias = !bias);
  return cs;
}

template <typename T>
void read_into(std::ifstream& f, std::vector<T>& v, size_t count) {
  v.resize(count);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(T)));
  ASSERT_TRUE(f.good());
}

Tensor f32_tensor(const std::vector<float>& v, Shape s) {
  Tensor t = Tensor::empty(DType::kF32, std::move(s));
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

const char* const kBackends[] = {"cpu-portable",   "cpu-avx2", "cpu-avx512",
                                 "cpu-avx512bf16", "emulated", "cuda"};

class LinearRef : public ::testing::TestWithParam<std::tuple<const char*, WeightFormat>> {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("mmrt_linear_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    cases_ = make_cases();
    {
      std::ofstream f(dir_ / "cases.bin", std::ios::binary);
      const int64_t cnt = static_cast<int64_t>(cases_.size());
      f.write(reinterpret_cast<const char*>(&cnt), 8);
      for (const Case& c : cases_) {
        const int64_t hdr[4] = {c.n, c.in, c.out, c.bias ? 1 : 0};
        f.write(reinterpret_cast<const char*>(hdr), sizeof(hdr));
        for (const auto* v : {&c.x, &c.w, &c.b})
          f.write(reinterpret_cast<const char*>(v->data()),
                  static_cast<std::streamsize>(v->size() * 4));
      }
    }
    const std::string cmd = std::string(MMRT_REF_PYTHON) + " " + MMRT_SOURCE_DIR +
                            "/tests/reference/linear_ref.py " + (dir_ / "cases.bin").string() +
                            " " + (dir_ / "ref.bin").string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "reference script failed: " << cmd;
    std::ifstream f(dir_ / "ref.bin", std::ios::binary);
    for (Case& c : cases_) {
      const size_t ny = static_cast<size_t>(c.n * c.out);
      for (auto* v : {&c.y_f32, &c.y_bf16w, &c.y_bf16, &c.y_i8, &c.y_i8_xbf16, &c.y_i8_xq8,
                      &c.q8_bound, &c.y_i8_xrow, &c.row_bound, &c.mag})
        read_into(f, *v, ny);
      read_into(f, c.q, static_cast<size_t>(c.out * c.in));
      read_into(f, c.scale, static_cast<size_t>(c.out));
      read_into(f, c.y_fp8, ny);
      read_into(f, c.q_fp8, static_cast<size_t>(c.out * c.in));
      read_into(f, c.scale_fp8, static_cast<size_t>(c.out));
    }
    f.peek();
    ASSERT_TRUE(f.eof()) << "reference output longer than expected";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  // The backend under test: the CPU with 2 threads capped at the variant (skipped where the CPU
  // lacks it), or a device (skipped where this build or machine has none, or it has no linear).
  void SetUp() override {
    const test::BackendParam b = test::parse_backend_param(std::get<0>(GetParam()));
    if (!b.skip.empty()) GTEST_SKIP() << b.skip;
    be_ = test::backend_for(b, /*threads=*/2);
    if (!be_->has(Op::kLinear))
      GTEST_SKIP() << std::get<0>(GetParam()) << " has no kernel for linear";
    fp8_packs_only_ =
        std::get<1>(GetParam()) == WeightFormat::kFp8 && (be_->device().is_host() || b.emulated);
  }
  // FP8 weights on a backend of CPU kernels: packed (for a GPU), never multiplied.
  bool fp8_packs_only_ = false;
#define MMRT_SKIP_FP8_ON_CPU() \
  if (fp8_packs_only_) GTEST_SKIP() << "fp8 weights compute on CUDA devices only"

  PackedLinear pack(const Case& c, WeightFormat fmt) const {
    const Tensor w = f32_tensor(c.w, {c.out, c.in});
    const Tensor b = c.bias ? f32_tensor(c.b, {c.out}) : Tensor();
    return PackedLinear::pack(*be_, w, c.bias ? &b : nullptr, fmt);
  }

  // p's stored 8-bit weights and per-row scales (copied to the host) are q and scale bit for bit.
  template <class Q>
  void expect_stored(const Case& c, const PackedLinear& p, const std::vector<Q>& q,
                     const std::vector<float>& scale) const {
    std::vector<Q> got(static_cast<size_t>(c.out * c.in));
    std::vector<float> scales(static_cast<size_t>(c.out));
    be_->copy_to_host(got.data(), p.weight_data(), got.size());
    be_->copy_to_host(scales.data(), p.scales(), scales.size() * sizeof(float));
    for (int64_t o = 0; o < c.out; ++o) {
      ASSERT_EQ(scales[static_cast<size_t>(o)], scale[static_cast<size_t>(o)]) << "row " << o;
      for (int64_t k = 0; k < c.in; ++k)
        ASSERT_EQ(got[o * c.in + k], q[static_cast<size_t>(o * c.in + k)])
            << "row " << o << " col " << k;
    }
  }

  // Runs every case through `opt` and checks it against the matching reference.
  void check_all(const LinearOptions& opt, const char* what) {
    MMRT_SKIP_FP8_ON_CPU();
    const WeightFormat fmt = std::get<1>(GetParam());
    for (const Case& c : cases_) {
      const PackedLinear p = pack(c, fmt);
      const test::DeviceBuf x(*be_, c.x);
      test::DeviceBuf yd(*be_, static_cast<size_t>(c.n * c.out));  // NaN
      linear(*be_, x.get(), c.n, p, yd.get(), opt);
      const std::vector<float> y = yd.host();
      const LinearPlan plan = linear_plan(*be_, c.n, p, opt);
      // ref: same weights and same x rounding as the kernel; exact: x kept f32 (and for
      // bf16 weights also W unrounded), only checked when the kernel rounds x.
      const std::vector<double>* ref = nullptr;
      const std::vector<double>* exact = &c.y_f32;
      switch (fmt) {
        case WeightFormat::kF32:
          ref = &c.y_f32;
          break;
        case WeightFormat::kBF16:
          ref = plan.x_rounded_to_bf16 ? &c.y_bf16 : &c.y_bf16w;
          break;
        case WeightFormat::kInt8:
          ref = plan.x_quantised_q8       ? &c.y_i8_xq8
                : plan.x_quantised_q8_row ? &c.y_i8_xrow
                : plan.x_rounded_to_bf16  ? &c.y_i8_xbf16
                                          : &c.y_i8;
          exact = &c.y_i8;
          break;
        case WeightFormat::kFp8:
          ref = exact = &c.y_fp8;  // x always rounded to bf16
          break;
      }
      size_t bad = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        const double tol = 1e-5 * c.mag[i];
        const double err = std::fabs(y[i] - (*ref)[i]);
        bool ok = err <= tol;
        if (plan.x_rounded_to_bf16) ok = ok && std::fabs(y[i] - (*exact)[i]) <= 1e-2 * c.mag[i];
        if (plan.x_quantised_q8)
          ok = ok && std::fabs(y[i] - (*exact)[i]) <= 1.001 * c.q8_bound[i] + 1e-5 * c.mag[i];
        if (plan.x_quantised_q8_row)
          ok = ok && std::fabs(y[i] - (*exact)[i]) <= 1.001 * c.row_bound[i] + 1e-5 * c.mag[i];
        if (!ok && ++bad <= 5)
          ADD_FAILURE() << what << " " << plan.kernel << " n=" << c.n << " in=" << c.in
                        << " out=" << c.out << " bias=" << c.bias << " [" << i / c.out << ","
                        << i % c.out << "]: got " << y[i] << " ref " << (*ref)[i] << " exact ref "
                        << (*exact)[i] << " err " << err << " tol " << tol;
      }
      EXPECT_EQ(bad, 0u) << what << " n=" << c.n << " in=" << c.in << " out=" << c.out;
    }
  }

  std::unique_ptr<Backend> be_;
  static fs::path dir_;
  static std::vector<Case> cases_;
};
fs::path LinearRef::dir_;
std::vector<Case> LinearRef::cases_;

TEST_P(LinearRef, GemvMatchesTorch) {
  LinearOptions opt;
  opt.path = LinearPath::kGemv;
  check_all(opt, "gemv");
}

// Strictly weight-only int8 decode (x not quantised) on every variant, VNNI or not.
TEST_P(LinearRef, GemvFloatActivationsMatchesTorch) {
  LinearOptions opt;
  opt.path = LinearPath::kGemv;
  opt.int8_x = Int8Activations::kFloat;
  check_all(opt, "gemv/float-x");
}

TEST_P(LinearRef, GemmOneDnnMatchesTorch) {
  LinearOptions opt;
  opt.path = LinearPath::kGemm;
  opt.f32_gemm = GemmLibrary::kOneDnn;
  check_all(opt, "gemm/onednn");
}

TEST_P(LinearRef, GemmOpenBlasMatchesTorch) {
  LinearOptions opt;
  opt.path = LinearPath::kGemm;
  opt.f32_gemm = GemmLibrary::kOpenBlas;
  check_all(opt, "gemm/openblas");
}

// The encoders' int8 GEMM: x quantised per row, integer products (VNNI; elsewhere, and for
// other weight formats, the option changes nothing and the usual references apply).
TEST_P(LinearRef, GemmInt8RowsMatchesTorch) {
  LinearOptions opt;
  opt.path = LinearPath::kGemm;
  opt.int8_gemm = Int8Gemm::kQ8Row;
  check_all(opt, "gemm/q8-row");
  const bool vnni = std::string(std::get<0>(GetParam())) == "cpu-avx512bf16" &&
                    int8_q8_available(Isa::kAvx512Bf16);
  if (vnni && std::get<1>(GetParam()) == WeightFormat::kInt8) {
    EXPECT_TRUE(
        linear_plan(*be_, 64, pack(cases_.back(), WeightFormat::kInt8), opt).x_quantised_q8_row)
        << "a VNNI CPU must take the integer GEMM";
  }
}

TEST_P(LinearRef, AutoPathMatchesTorch) {
  check_all(LinearOptions{}, "auto");
}

// Our int8 packing must reproduce torch's quantisation exactly (same f32 arithmetic).
TEST_P(LinearRef, Int8QuantisationMatchesTorch) {
  if (std::get<1>(GetParam()) != WeightFormat::kInt8) GTEST_SKIP() << "int8 only";
  for (const Case& c : cases_) expect_stored(c, pack(c, WeightFormat::kInt8), c.q, c.scale);
}

// FP8 E4M3 packing on every backend (the CPU packs for a GPU too): the reference's codes and
// scales, bit for bit; a CPU then refuses to multiply them, naming the devices that can.
TEST_P(LinearRef, Fp8QuantisationMatchesTheDefinition) {
  if (std::get<1>(GetParam()) != WeightFormat::kFp8) GTEST_SKIP() << "fp8 only";
  for (const Case& c : cases_) {
    const PackedLinear p = pack(c, WeightFormat::kFp8);
    expect_stored(c, p, c.q_fp8, c.scale_fp8);
    if (fp8_packs_only_) {
      const test::DeviceBuf x(*be_, c.x);
      test::DeviceBuf y(*be_, static_cast<size_t>(c.n * c.out));
      EXPECT_THROW(linear(*be_, x.get(), c.n, p, y.get(), {}), Unimplemented);
    }
  }
}

std::string param_name(const ::testing::TestParamInfo<LinearRef::ParamType>& info) {
  std::string b = std::get<0>(info.param);
  for (char& ch : b)
    if (ch == '-') ch = '_';
  return b + "_" + std::string(weight_format_name(std::get<1>(info.param)));
}

// LinearOptions::act and accumulate in the kernel, on every backend and path: y = act(x·Wᵀ + b)
// (+ y's old values) against the plain product with the activation and the add done in double on
// the host (relative 1e-5: the device's activation rounds in f32).
TEST_P(LinearRef, ActivationAndResidualAddInTheKernel) {
  MMRT_SKIP_FP8_ON_CPU();
  const WeightFormat fmt = std::get<1>(GetParam());
  for (const Case& c : cases_) {
    const PackedLinear p = pack(c, fmt);
    const test::DeviceBuf x(*be_, c.x);
    const size_t cnt = static_cast<size_t>(c.n * c.out);
    std::vector<float> y0(cnt);
    for (size_t i = 0; i < cnt; ++i) y0[i] = std::sin(0.37f * static_cast<float>(i));
    for (const LinearPath path : {LinearPath::kGemv, LinearPath::kGemm}) {
      LinearOptions o;
      o.path = path;
      test::DeviceBuf plain(*be_, cnt);
      linear(*be_, x.get(), c.n, p, plain.get(), o);
      const std::vector<float> base = plain.host();
      for (const LinearAct act : {LinearAct::kQuickGelu, LinearAct::kGeluErf})
        for (const bool acc : {false, true}) {
          test::DeviceBuf y(*be_, y0);
          o.act = act;
          o.accumulate = acc;
          linear(*be_, x.get(), c.n, p, y.get(), o);
          const std::vector<float> got = y.host();
          size_t bad = 0;
          for (size_t i = 0; i < cnt; ++i) {
            const double v = base[i];
            const double a = act == LinearAct::kQuickGelu
                                 ? v / (1.0 + std::exp(-1.702 * v))
                                 : 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
            const double want = a + (acc ? y0[i] : 0.0);
            const double tol = 1e-5 * (std::fabs(a) + (acc ? std::fabs(y0[i]) : 0.0)) + 1e-6;
            if (!(std::fabs(got[i] - want) <= tol) && ++bad <= 3)
              ADD_FAILURE() << linear_plan(*be_, c.n, p, o).kernel << " n=" << c.n << " in=" << c.in
                            << " out=" << c.out << " act " << static_cast<int>(act) << " acc "
                            << acc << " [" << i << "]: got " << got[i] << " want " << want;
          }
          EXPECT_EQ(bad, 0u);
        }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, LinearRef,
    ::testing::Combine(::testing::ValuesIn(kBackends),
                       ::testing::Values(WeightFormat::kF32, WeightFormat::kBF16,
                                         WeightFormat::kInt8, WeightFormat::kFp8)),
    param_name);

}  // namespace
