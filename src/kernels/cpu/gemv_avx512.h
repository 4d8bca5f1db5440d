// Internal: AVX-512 pieces shared by the decode kernels of linear_avx512.cpp and
// linear_avx512bf16.cpp (compiled with their flags; anonymous namespace as in gemv_driver.h).
#pragma once

#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/gemv_driver.h"

namespace mmrt::kernels::detail {
namespace {  // NOLINT(google-build-namespaces)

// Software prefetch distance for the weight rows. Batches spend 10+ cycles per line, too long
// for the out-of-order window alone to keep enough DRAM reads in flight; measured (one core,
// 50 MB of bf16 weights, n = 4): 43 GFLOP/s without, 50 at 1 KiB, 60 at 2 KiB, 66 at 4 KiB.
// Batch 1 is within noise of no prefetch (hints T1/T2/NTA and 8 KiB measured the same).
constexpr int64_t kPrefetch = 4096;

// Software prefetch of rows 0..R-1 (ld_bytes apart), kPrefetch bytes ahead of p.
template <int R>
MMRT_ALWAYS_INLINE void prefetch_rows(const void* p, int64_t ld_bytes) {
  if constexpr (kPrefetch > 0)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      _mm_prefetch(static_cast<const char*>(p) + r * ld_bytes + kPrefetch, _MM_HINT_T0);
}

// Horizontal sums.
inline float hsum(__m512 v) {
  const __m512 s = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m256 t = _mm512_castps512_ps256(s);
  __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  u = _mm_add_ps(u, _mm_movehl_ps(u, u));
  u = _mm_add_ss(u, _mm_movehdup_ps(u));
  return _mm_cvtss_f32(u);
}
template <int A, int R, int NB>
MMRT_ALWAYS_INLINE void zero(__m512 (&acc)[A][R][NB]) {
  fill(acc, _mm512_setzero_ps());
}

// Sums the accumulator sets and writes y[j0 + j, o + r] = scale * dot + bias.
template <int A, int R, int NB>
MMRT_ALWAYS_INLINE void finish(const GemvArgs& a, int64_t o, int64_t j0, __m512 (&acc)[A][R][NB]) {
  store_tile(
      a, o, j0, acc, [](__m512 p, __m512 q) { return _mm512_add_ps(p, q); },
      [](__m512 v) { return hsum(v); }, [](int, int) { return 0.f; });
}

// One tile over W-element steps of k (W = 16, 32 or 64): K::step<R, NB>(acc, w, ldw, x, ldx, k,
// mask) at each step (A accumulator sets, then single steps, then a masked tail; x is zero padded
// or masked past a.k), one weight prefetch per 64-byte line, then finish().
template <class K, int W, int R, int NB, class T, class X>
MMRT_ALWAYS_INLINE void tile_steps(const GemvArgs& a, int64_t o, int64_t j0, const T* w,
                                   const X* x) {
  static_assert(W == 16 || W == 32 || W == 64);
  using Mask =
      std::conditional_t<W == 64, __mmask64, std::conditional_t<W == 32, __mmask32, __mmask16>>;
  constexpr int A = acc_sets<R, NB>();
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));  // elements per line
  constexpr Mask kFull = static_cast<Mask>(~Mask{0});
  __m512 acc[A][R][NB];
  zero(acc);
  int64_t k = 0;
  for (; k + W * A <= a.k; k += W * A)
    unroll<A>([&](auto u) {
      if ((k + W * u) % kLine == 0)
        prefetch_rows<R>(w + k + W * u, a.ldw * static_cast<int64_t>(sizeof(T)));
      K::template step<R, NB>(acc[u], w, a.ldw, x, a.ldx, k + W * u, kFull);
    });
  for (; k + W <= a.k; k += W) K::template step<R, NB>(acc[0], w, a.ldw, x, a.ldx, k, kFull);
  if (k < a.k)
    K::template step<R, NB>(acc[0], w, a.ldw, x, a.ldx, k,
                            static_cast<Mask>((uint64_t{1} << (a.k - k)) - 1));
  finish(a, o, j0, acc);
}

}  // namespace
}  // namespace mmrt::kernels::detail
