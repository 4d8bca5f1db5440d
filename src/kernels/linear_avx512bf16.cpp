// AVX512-BF16 decode kernels for bf16 and int8 weights: x is rounded to bf16 once per call (as
// the prefill GEMM already does on this CPU), and every 32 weights are one vdpbf16ps against
// 64 bytes of x (int8 weights are first widened to bf16, exactly). Int8 thereby loses the
// per-element f32 conversions of the f32-x kernel, its decode bottleneck. Against the f32-x kernel
// (linear_avx512.cpp) this halves the x bytes: a 8960-wide x then fits the 32 KiB L1 next to the
// weight stream (measured in a standalone loop, 2 threads, 1 GiB of weights: 49 vs 44 GB/s at in =
// 8960, 56 vs 53 at in = 1536), and decode rows round x exactly as prefill rows do, so a sequence
// gets the same products in either path. The other entries of the table are the AVX-512 ones.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/linear_impl.h"

namespace mmrt::kernels::detail {

namespace {

#define MMRT_ALWAYS_INLINE inline __attribute__((always_inline))

constexpr int kGroup = 8;            // input rows per tile pass
constexpr int64_t kPrefetch = 4096;  // bytes ahead per weight row (see linear_avx512.cpp)
using TileFn = void (*)(const GemvArgs&, int64_t o, int64_t j0);

inline float hsum(__m512 v) {
  return _mm512_reduce_add_ps(v);
}

template <int N, class F>
MMRT_ALWAYS_INLINE void unroll(F&& f) {
  [&]<int... U>(std::integer_sequence<int, U...>) {
    (f(std::integral_constant<int, U>{}), ...);
  }
  (std::make_integer_sequence<int, N>{});
}

// R output rows x NB input rows, A independent accumulator sets per pair (>= 4 chains).
template <int R, int NB>
constexpr int acc_sets() {
  return R * NB == 1 ? 4 : R * NB == 2 ? 2 : 1;
}

// 32 weights from k on as bf16: bf16 rows load as they are; int8 rows are widened exactly
// (|q| <= 127 has at most 7 significant bits) through f32.
struct Bf16W {
  using T = uint16_t;
  static constexpr int64_t kLine = 32;  // weights per 64-byte line
  static MMRT_ALWAYS_INLINE __m512bh load(const T* p, __mmask32 mask) {
    return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, p));
  }
};
struct I8W {
  using T = int8_t;
  static constexpr int64_t kLine = 64;
  static MMRT_ALWAYS_INLINE __m512bh load(const T* p, __mmask32 mask) {
    // Plain loads in the loop body (the constant full mask folds away): they fuse into the
    // sign extensions; masked ones do not.
    const bool full = mask == ~__mmask32{0};
    const __m128i lo = full ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                            : _mm_maskz_loadu_epi8(static_cast<__mmask16>(mask), p);
    const __m128i hi = full ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))
                            : _mm_maskz_loadu_epi8(static_cast<__mmask16>(mask >> 16), p + 16);
    return _mm512_cvtne2ps_pbh(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)),
                               _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)));
  }
};

// x here: bf16 bits [n, ldx], zero padded to a multiple of 32 (prep_x below).
template <class W, int R, int NB>
MMRT_ALWAYS_INLINE void step(__m512 (&acc)[R][NB], const typename W::T* w, int64_t ldw,
                             const uint16_t* x, int64_t ldx, int64_t k, __mmask32 mask) {
  __m512bh wv[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) wv[r] = W::load(w + r * ldw + k, mask);
#pragma GCC unroll 16
  for (int j = 0; j < NB; ++j) {
    const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_load_si512(x + j * ldx + k));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], wv[r], xv);
  }
}

template <class W, int R, int NB>
void tile(const GemvArgs& a, int64_t o, int64_t j0) {
  constexpr int A = acc_sets<R, NB>();
  const auto* w = static_cast<const typename W::T*>(a.w) + o * a.ldw;
  const auto* x = reinterpret_cast<const uint16_t*>(a.x) + j0 * a.ldx;
  __m512 acc[A][R][NB];
#pragma GCC unroll 16
  for (int u = 0; u < A; ++u)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int j = 0; j < NB; ++j) acc[u][r][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 * A <= a.k; k += 32 * A)
    unroll<A>([&](auto u) {
      if ((k + 32 * u) % W::kLine == 0)  // one prefetch per 64-byte line
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(w + r * a.ldw + k + 32 * u) + kPrefetch,
                       _MM_HINT_T0);
      step<W, R, NB>(acc[u], w, a.ldw, x, a.ldx, k + 32 * u, ~__mmask32{0});
    });
  for (; k + 32 <= a.k; k += 32) step<W, R, NB>(acc[0], w, a.ldw, x, a.ldx, k, ~__mmask32{0});
  if (k < a.k)
    step<W, R, NB>(acc[0], w, a.ldw, x, a.ldx, k,
                   static_cast<__mmask32>((uint64_t{1} << (a.k - k)) - 1));
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      __m512 v = acc[0][r][j];
#pragma GCC unroll 16
      for (int u = 1; u < A; ++u) v = _mm512_add_ps(v, acc[u][r][j]);
      float s = hsum(v);
      if (a.scale) s *= a.scale[o + r];
      if (a.bias) s += a.bias[o + r];
      a.y[(j0 + j) * a.ldy + o + r] = s;
    }
}

template <class W, int R, int... I>
constexpr std::array<TileFn, sizeof...(I)> tiles(std::integer_sequence<int, I...>) {
  return {&tile<W, R, I + 1>...};
}

// Output rows in order, R at a time (one row for single inputs: one sequential weight stream
// per thread; two for batches, so every x load feeds two rows).
template <class W>
void gemv(const GemvArgs& a, int64_t o0, int64_t o1) {
  static constexpr auto t1 = tiles<W, 1>(std::make_integer_sequence<int, kGroup>{});
  static constexpr auto t2 = tiles<W, 2>(std::make_integer_sequence<int, kGroup>{});
  const int R = a.n <= 2 ? 1 : 2;
  const TileFn* t = R == 1 ? t1.data() : t2.data();
  int64_t o = o0;
  for (; o + R <= o1; o += R)
    for (int64_t j0 = 0; j0 < a.n; j0 += kGroup)
      t[std::min<int64_t>(kGroup, a.n - j0) - 1](a, o, j0);
  for (; o < o1; ++o)
    for (int64_t j0 = 0; j0 < a.n; j0 += kGroup)
      t1[std::min<int64_t>(kGroup, a.n - j0) - 1](a, o, j0);
}

// x [n, k] f32 -> bf16 bits (round to nearest even) [n, xp_stride], zero padded. xp_stride
// counts bf16 elements; the caller's buffer (sized for floats) is large enough.
void prep_x(const float* x, int64_t ldx, int64_t n, int64_t k, float* xp, int64_t xp_stride) {
  auto* dst0 = reinterpret_cast<uint16_t*>(xp);
  for (int64_t j = 0; j < n; ++j) {
    const float* src = x + j * ldx;
    uint16_t* dst = dst0 + j * xp_stride;
    for (int64_t kb = 0; kb < xp_stride; kb += 32) {
      const int64_t left = std::clamp<int64_t>(k - kb, 0, 32);
      const __mmask16 m0 = static_cast<__mmask16>((1u << std::min<int64_t>(left, 16)) - 1);
      const __mmask16 m1 = static_cast<__mmask16>((1u << std::max<int64_t>(left - 16, 0)) - 1);
      const __m512 lo = _mm512_maskz_loadu_ps(m0, src + kb);
      const __m512 hi = _mm512_maskz_loadu_ps(m1, src + kb + 16);
      _mm512_store_si512(dst + kb, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
}

}  // namespace

const LinearKernels& linear_kernels_avx512bf16() {
  static const LinearKernels t = [] {
    LinearKernels k = linear_kernels_avx512();
    k.isa = "avx512bf16";
    k.gemv_bf16 = gemv<Bf16W>;
    k.gemv_i8 = gemv<I8W>;
    k.prep_x_bf16 = prep_x;
    k.gemv_x_bf16 = true;
    k.native_bf16_gemm = true;
    return k;
  }();
  return t;
}

}  // namespace mmrt::kernels::detail
