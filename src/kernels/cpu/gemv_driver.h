// Internal: the ISA-neutral skeleton of the decode mat-vec kernels, included by the per-ISA files
// (linear_avx2.cpp, linear_avx512.cpp, linear_avx512bf16.cpp) and compiled with each one's flags.
// Everything here is in an anonymous namespace on purpose: each ISA file gets its own copy, so
// the linker can never hand an AVX-512 instantiation to the AVX2 path.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/cpu/linear_impl.h"

#define MMRT_ALWAYS_INLINE inline __attribute__((always_inline))

namespace mmrt::kernels::detail {
namespace {  // NOLINT(google-build-namespaces): one copy per ISA translation unit, see above

using TileFn = void (*)(const GemvArgs&, int64_t o, int64_t j0);

// One stored weight as f32 (exact), for scalar loops and tails.
inline float widen(float v) {
  return v;
}
inline float widen(uint16_t bf16) {
  const uint32_t u = static_cast<uint32_t>(bf16) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float widen(int8_t v) {
  return static_cast<float>(v);
}

// A tile is R output rows against NB input rows, with R * NB * A accumulators: A independent
// sets per pair keep at least four FMA chains in flight. Single-row inputs use R = 1: each
// thread then reads one sequential stream of weight rows, measurably faster than interleaving
// rows. Batches are compute-bound and use R = 2 so every x load feeds two rows.
template <int R, int NB>
constexpr int acc_sets() {
  return R * NB == 1 ? 4 : R * NB == 2 ? 2 : 1;
}

// Every loop over accumulators is fully unrolled (#pragma GCC unroll): GCC otherwise keeps the
// accumulator array in memory and stores it on every iteration of the hot loop (measured 2x).
template <int A, int R, int NB, class V>
MMRT_ALWAYS_INLINE void fill(V (&acc)[A][R][NB], V v) {
#pragma GCC unroll 16
  for (int u = 0; u < A; ++u)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int j = 0; j < NB; ++j) acc[u][r][j] = v;
}

// Sums the A accumulator sets of every (r, j) pair (add: vector add, sum: horizontal sum), adds
// tail(r, j) (a scalar remainder) and writes y[j0 + j, o + r] = scale * dot + bias.
template <int A, int R, int NB, class V, class Add, class Sum, class Tail>
MMRT_ALWAYS_INLINE void store_tile(const GemvArgs& a, int64_t o, int64_t j0, V (&acc)[A][R][NB],
                                   Add add, Sum sum, Tail tail) {
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      V v = acc[0][r][j];
#pragma GCC unroll 16
      for (int u = 1; u < A; ++u) v = add(v, acc[u][r][j]);
      float s = sum(v) + tail(r, j);
      if (a.scale) s *= a.scale[o + r];
      if (a.bias) s += a.bias[o + r];
      a.y[(j0 + j) * a.ldy + o + r] = s;
    }
}

// Calls f(std::integral_constant<int, 0>) ... f(<N - 1>): accumulator sets are then indexed by
// constants, which keeps them in registers.
template <int N, class F>
MMRT_ALWAYS_INLINE void unroll(F&& f) {
  [&]<int... U>(std::integer_sequence<int, U...>) {
    (f(std::integral_constant<int, U>{}), ...);
  }
  (std::make_integer_sequence<int, N>{});
}

template <class K, int R, int... I>
constexpr std::array<TileFn, sizeof...(I)> tiles(std::integer_sequence<int, I...>) {
  return {&K::template tile<R, I + 1>...};
}

// Output rows [o0, o1) in order, R at a time; input rows in groups of up to Group per pass (a
// second pass over the same weight rows hits L1/L2). K::tile<R, NB> computes one tile.
template <class K, int Group>
void gemv_rows(const GemvArgs& a, int64_t o0, int64_t o1) {
  static constexpr auto t1 = tiles<K, 1>(std::make_integer_sequence<int, Group>{});
  static constexpr auto t2 = tiles<K, 2>(std::make_integer_sequence<int, Group>{});
  constexpr int64_t kGroup = Group;
  if (a.invariant) {  // one tile shape for every (output, input) row pair: one order per row
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t j = 0; j < a.n; ++j) t1[0](a, o, j);
    return;
  }
  const int R = a.n <= 2 ? 1 : 2;
  const TileFn* t = R == 1 ? t1.data() : t2.data();
  int64_t o = o0;
  for (; o + R <= o1; o += R)
    for (int64_t j0 = 0; j0 < a.n; j0 += kGroup) t[std::min(kGroup, a.n - j0) - 1](a, o, j0);
  for (; o < o1; ++o)
    for (int64_t j0 = 0; j0 < a.n; j0 += kGroup) t1[std::min(kGroup, a.n - j0) - 1](a, o, j0);
}

// Walks x [n, k] in blocks of 32 up to xp_stride (a multiple of 32): calls
// block(j, kb, m_lo, m_hi) with the masks of the valid elements in kb..kb+15 and kb+16..kb+31.
template <class Block>
MMRT_ALWAYS_INLINE void for_x_blocks32(int64_t n, int64_t k, int64_t xp_stride, Block&& block) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t kb = 0; kb < xp_stride; kb += 32) {
      const int64_t left = std::clamp<int64_t>(k - kb, 0, 32);
      const auto m0 = static_cast<uint16_t>((1u << std::min<int64_t>(left, 16)) - 1);
      const auto m1 = static_cast<uint16_t>((1u << std::max<int64_t>(left - 16, 0)) - 1);
      block(j, kb, m0, m1);
    }
}

}  // namespace
}  // namespace mmrt::kernels::detail
