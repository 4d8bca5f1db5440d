// Internal: thin SIMD wrappers shared by the ops / rope / attention kernels.
// Every kernel template is written once against this interface and instantiated per ISA in the
// matching *_avx512.cpp / *_avx2.cpp file (and with VecScalar in the portable .cpp). Each wrapper
// is only defined when the including file is compiled with its ISA flags, and everything lives in
// an anonymous namespace, so per-file copies compiled with different flags never collide.
#pragma once

#include <immintrin.h>

#if defined(__AVX512F__) && !defined(__clang__)
// GCC 12 reports its own _mm512_undefined_ps() inside max/min/scalef/roundscale/reduce as
// "used uninitialized" once inlined; the warning is spurious (the lanes are fully written).
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace mmrt::kernels::simd {
namespace {

inline float bf16_bits_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One float per "vector": the portable fallback (libm exp/erfc, plain loops).
struct VecScalar {
  static constexpr int W = 1;
  using R = float;
  static R load(const float* p) { return *p; }
  static R load(const uint16_t* p) { return bf16_bits_to_f32(*p); }  // bf16 bits
  // f32(a - b) of int32 lanes (b null: f32(a)); the difference must not overflow.
  static R load_i32(const int32_t* a, const int32_t* b) {
    return static_cast<float>(b ? *a - *b : *a);
  }
  static void store(float* p, R v) { *p = v; }
  static R set1(float v) { return v; }
  static R add(R a, R b) { return a + b; }
  static R sub(R a, R b) { return a - b; }
  static R mul(R a, R b) { return a * b; }
  static R div(R a, R b) { return a / b; }
  static R max(R a, R b) { return a > b || std::isnan(a) ? a : b; }
  static R fma(R a, R b, R c) { return a * b + c; }
  static float hsum(R v) { return v; }
  static float hmax(R v) { return v; }
  static R exp(R v) { return std::exp(v); }
  static R erfc(R v) { return std::erfc(v); }
  static R abs(R v) { return std::fabs(v); }
  static R select_neg(R x, R neg, R pos) { return x < 0.0f ? neg : pos; }  // per lane x<0 ? n : p
  // Lanes with index >= n_valid become `fill`.
  static R keep_first(R v, int n_valid, float fill) { return n_valid >= 1 ? v : fill; }
};

// Shared polynomial pieces (Cephes expf; Numerical Recipes erfc, fractional error < 1.2e-7).
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kExpHi = 88.3762626647949f;
constexpr float kExpLo = -87.3365447504f;  // below: result flushed to 0 (no denormals)

#if defined(__AVX512F__)
struct Vec512 {
  static constexpr int W = 16;
  using R = __m512;
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static R load(const uint16_t* p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static R load_i32(const int32_t* a, const int32_t* b) {
    __m512i v = _mm512_loadu_si512(a);
    if (b) v = _mm512_sub_epi32(v, _mm512_loadu_si512(b));
    return _mm512_cvtepi32_ps(v);
  }
  static void store(float* p, R v) { _mm512_storeu_ps(p, v); }
  static R set1(float v) { return _mm512_set1_ps(v); }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R div(R a, R b) { return _mm512_div_ps(a, b); }
  // NaN in `a` propagates (max_ps returns the second operand when either is NaN).
  static R max(R a, R b) { return _mm512_max_ps(b, a); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static float hsum(R v) { return _mm512_reduce_add_ps(v); }
  static float hmax(R v) { return _mm512_reduce_max_ps(v); }
  static R abs(R v) { return _mm512_abs_ps(v); }
  static R select_neg(R x, R neg, R pos) {
    __mmask16 m = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_mov_ps(pos, m, neg);
  }
  static R keep_first(R v, int n_valid, float fill) {
    if (n_valid >= 16) return v;
    __mmask16 m = n_valid <= 0 ? 0 : static_cast<__mmask16>((1u << n_valid) - 1);
    return _mm512_mask_mov_ps(_mm512_set1_ps(fill), m, v);
  }
  static R exp(R x) {
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpLo), _CMP_NLT_UQ);  // NaN kept
    x = _mm512_min_ps(_mm512_set1_ps(kExpHi), _mm512_max_ps(_mm512_set1_ps(kExpLo), x));
    R n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    R r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
    R p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    R y = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(y, n));
  }
  static R erfc(R x);  // x >= 0 only; defined below (needs exp)
};
#endif

#if defined(__AVX2__)
struct Vec256 {
  static constexpr int W = 8;
  using R = __m256;
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static R load(const uint16_t* p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static R load_i32(const int32_t* a, const int32_t* b) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
    if (b) v = _mm256_sub_epi32(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
    return _mm256_cvtepi32_ps(v);
  }
  static void store(float* p, R v) { _mm256_storeu_ps(p, v); }
  static R set1(float v) { return _mm256_set1_ps(v); }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R div(R a, R b) { return _mm256_div_ps(a, b); }
  static R max(R a, R b) { return _mm256_max_ps(b, a); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static float hsum(R v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(R v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static R abs(R v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
  static R select_neg(R x, R neg, R pos) {
    return _mm256_blendv_ps(pos, neg, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  }
  static R keep_first(R v, int n_valid, float fill) {
    if (n_valid >= 8) return v;
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 m = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n_valid), idx));
    return _mm256_blendv_ps(_mm256_set1_ps(fill), v, m);
  }
  static R exp(R x) {
    R keep = _mm256_cmp_ps(x, _mm256_set1_ps(kExpLo), _CMP_NLT_UQ);
    x = _mm256_min_ps(_mm256_set1_ps(kExpHi), _mm256_max_ps(_mm256_set1_ps(kExpLo), x));
    R n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    R r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
    R p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    R y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    // n in [-126, 128]: build 2^n as two factors so n = 128 does not overflow the exponent.
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i half = _mm256_srai_epi32(ni, 1);
    R s1 =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
    R s2 = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
    return _mm256_and_ps(_mm256_mul_ps(_mm256_mul_ps(y, s1), s2), keep);
  }
  static R erfc(R x);  // x >= 0 only
};
#endif

// erfc(x) for x >= 0 (Numerical Recipes erfcc): t = 1/(1+x/2), erfc = t*exp(-x^2 + P(t)).
template <class V>
typename V::R erfc_nonneg(typename V::R z) {
  using R = typename V::R;
  R t = V::div(V::set1(1.0f), V::fma(z, V::set1(0.5f), V::set1(1.0f)));
  R p = V::set1(0.17087277f);
  p = V::fma(p, t, V::set1(-0.82215223f));
  p = V::fma(p, t, V::set1(1.48851587f));
  p = V::fma(p, t, V::set1(-1.13520398f));
  p = V::fma(p, t, V::set1(0.27886807f));
  p = V::fma(p, t, V::set1(-0.18628806f));
  p = V::fma(p, t, V::set1(0.09678418f));
  p = V::fma(p, t, V::set1(0.37409196f));
  p = V::fma(p, t, V::set1(1.00002368f));
  p = V::fma(p, t, V::set1(-1.26551223f));
  R arg = V::sub(p, V::mul(z, z));
  return V::mul(t, V::exp(arg));
}

#if defined(__AVX512F__)
inline Vec512::R Vec512::erfc(R x) {
  return erfc_nonneg<Vec512>(x);
}
#endif
#if defined(__AVX2__)
inline Vec256::R Vec256::erfc(R x) {
  return erfc_nonneg<Vec256>(x);
}
#endif

}  // namespace
}  // namespace mmrt::kernels::simd
