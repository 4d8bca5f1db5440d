// AVX2+FMA matrix-vector kernels (decode), the same scheme as linear_avx512.cpp with 8-lane
// vectors and 16 registers: tiles of R output rows x NB input rows, bf16 widened by shift/mask
// against x prepared in even/odd order per 16-element block; tails (k % step) in scalar code.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels/cpu/gemv_driver.h"

namespace mmrt::kernels::detail {

namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Accumulator loops are fully unrolled (#pragma GCC unroll) so GCC keeps the accumulators in
// registers (see linear_avx512.cpp). A tile is R output rows x NB input rows with A sets
// (acc_sets, gemv_driver.h).

template <int A, int R, int NB>
MMRT_ALWAYS_INLINE void zero(__m256 (&acc)[A][R][NB]) {
  fill(acc, _mm256_setzero_ps());
}

// Adds the sets, then the scalar tail k in [k0, a.k) (x and w in natural order there), and
// writes y[j0 + j, o + r] = scale * dot + bias.
template <int A, int R, int NB, typename T>
MMRT_ALWAYS_INLINE void finish(const GemvArgs& a, int64_t o, int64_t j0, const T* w, const float* x,
                               int64_t k0, __m256 (&acc)[A][R][NB]) {
  store_tile(
      a, o, j0, acc, [](__m256 p, __m256 q) { return _mm256_add_ps(p, q); },
      [](__m256 v) { return hsum(v); },
      [&](int r, int j) {
        float t = 0;
        for (int64_t k = k0; k < a.k; ++k) t += widen(w[r * a.ldw + k]) * x[j * a.ldx + k];
        return t;
      });
}

// bf16: 16 weights per 32-byte load, x in even/odd order per 16-element block.
struct Bf16 {
  static constexpr int kStep = 16;
  template <int R, int NB>
  static MMRT_ALWAYS_INLINE void step(__m256 (&acc)[R][NB], const uint16_t* w, int64_t ldw,
                                      const float* x, int64_t ldx, int64_t k) {
    const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    __m256 we[R], wo[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * ldw + k));
      we[r] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      wo[r] = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
    }
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      const __m256 xe = _mm256_load_ps(x + j * ldx + k);
      const __m256 xo = _mm256_load_ps(x + j * ldx + k + 8);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        acc[r][j] = _mm256_fmadd_ps(we[r], xe, acc[r][j]);
        acc[r][j] = _mm256_fmadd_ps(wo[r], xo, acc[r][j]);
      }
    }
  }
  using T = uint16_t;
};

// int8 and f32: 8 weights per step, widened to f32.
inline __m256 load_w8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 load_w8(const float* p) {
  return _mm256_loadu_ps(p);
}

template <class W>
struct Wide8 {
  using T = W;
  static constexpr int kStep = 8;
  template <int R, int NB>
  static MMRT_ALWAYS_INLINE void step(__m256 (&acc)[R][NB], const T* w, int64_t ldw, const float* x,
                                      int64_t ldx, int64_t k) {
    __m256 wf[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wf[r] = load_w8(w + r * ldw + k);
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      const __m256 xv = _mm256_loadu_ps(x + j * ldx + k);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(wf[r], xv, acc[r][j]);
    }
  }
};
using I8 = Wide8<int8_t>;
using F32 = Wide8<float>;

// Weight prefetch distance (see linear_avx512.cpp).
constexpr int64_t kPrefetch = 4096;

template <class K, int R, int NB>
void tile(const GemvArgs& a, int64_t o, int64_t j0) {
  constexpr int A = acc_sets<R, NB>();
  constexpr int S = K::kStep;
  const auto* w = static_cast<const typename K::T*>(a.w) + o * a.ldw;  // [R, ldw]
  const float* x = a.x + j0 * a.ldx;                                   // [NB, ldx]
  __m256 acc[A][R][NB];
  zero(acc);
  int64_t k = 0;
  constexpr int64_t kLine = 64 / sizeof(typename K::T);  // elements per cache line
  for (; k + S * A <= a.k; k += S * A) {
    if ((k & (kLine - 1)) < S * A)  // once per line
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w + r * a.ldw + k) + kPrefetch, _MM_HINT_T0);
    unroll<A>([&](auto u) { K::template step<R, NB>(acc[u], w, a.ldw, x, a.ldx, k + S * u); });
  }
  for (; k + S <= a.k; k += S) K::template step<R, NB>(acc[0], w, a.ldw, x, a.ldx, k);
  finish(a, o, j0, w, x, k, acc);
}

// The driver's view of tile<K, R, NB>: one sequential weight stream (R = 1) for up to two
// input rows; batches use R = 2 (each x load feeds two rows) in groups of 4 input rows (16
// registers).
template <class K>
struct Tiles {
  template <int R, int NB>
  static void tile(const GemvArgs& a, int64_t o, int64_t j0) {
    detail::tile<K, R, NB>(a, o, j0);
  }
};
constexpr int kGroup = 4;

// x [n, k] -> per full 16-element block: 8 even-indexed values, then 8 odd-indexed ones; the
// last k % 16 values stay in natural order; zero padding up to xp_stride.
void prep_x_bf16(const float* x, int64_t ldx, int64_t n, int64_t k, float* xp, int64_t xp_stride) {
  const int64_t full = k / 16 * 16;
  for (int64_t j = 0; j < n; ++j) {
    const float* src = x + j * ldx;
    float* dst = xp + j * xp_stride;
    for (int64_t kb = 0; kb < full; kb += 16)
      for (int i = 0; i < 8; ++i) {
        dst[kb + i] = src[kb + 2 * i];
        dst[kb + 8 + i] = src[kb + 2 * i + 1];
      }
    for (int64_t i = full; i < k; ++i) dst[i] = src[i];
    for (int64_t i = k; i < xp_stride; ++i) dst[i] = 0.f;
  }
}

void i8_to_f32(const int8_t* q, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                  _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i)))));
  i8_to_f32_portable(q + i, dst + i, n - i);
}

uint64_t stream_read(const void* p, size_t bytes) {
  const auto* c = static_cast<const char*>(p);
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i + 128 <= bytes; i += 128) {
    s0 = _mm256_xor_si256(s0, _mm256_load_si256(reinterpret_cast<const __m256i*>(c + i)));
    s1 = _mm256_xor_si256(s1, _mm256_load_si256(reinterpret_cast<const __m256i*>(c + i + 32)));
    s2 = _mm256_xor_si256(s2, _mm256_load_si256(reinterpret_cast<const __m256i*>(c + i + 64)));
    s3 = _mm256_xor_si256(s3, _mm256_load_si256(reinterpret_cast<const __m256i*>(c + i + 96)));
  }
  const __m256i s = _mm256_xor_si256(_mm256_xor_si256(s0, s1), _mm256_xor_si256(s2, s3));
  alignas(32) uint64_t l[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), s);
  return l[0] + l[1] + l[2] + l[3];
}

}  // namespace

const LinearKernels& linear_kernels_avx2() {
  static const LinearKernels t{.isa = "avx2",
                               .gemv_f32 = gemv_rows<Tiles<F32>, kGroup>,
                               .gemv_bf16 = gemv_rows<Tiles<Bf16>, kGroup>,
                               .gemv_i8 = gemv_rows<Tiles<I8>, kGroup>,
                               .prep_x_bf16 = prep_x_bf16,
                               .i8_to_bf16 = i8_to_bf16_portable,
                               .i8_to_f32 = i8_to_f32,
                               .stream_read = stream_read,
                               .native_bf16_gemm = false};
  return t;
}

}  // namespace mmrt::kernels::detail
