// AVX512-BF16 decode kernels for bf16 and int8 weights: x is rounded to bf16 once per call (as
// the prefill GEMM already does on this CPU), and every 32 weights are one vdpbf16ps against
// 64 bytes of x (int8 weights are first widened to bf16, exactly). Int8 thereby loses the
// per-element f32 conversions of the f32-x kernel, its decode bottleneck. Against the f32-x kernel
// (linear_avx512.cpp) this halves the x bytes: a 8960-wide x then fits the 32 KiB L1 next to the
// weight stream (measured in a standalone loop, 2 threads, 1 GiB of weights: 49 vs 44 GB/s at in =
// 8960, 56 vs 53 at in = 1536), and decode rows round x exactly as prefill rows do, so a sequence
// gets the same products in either path. The other entries of the table are the AVX-512 ones.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/gemv_avx512.h"

namespace mmrt::kernels::detail {

namespace {

constexpr int kGroup = 8;  // input rows per tile pass

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

// Tiles over weights of kind W against x as bf16 bits [n, ldx], zero padded to a multiple of
// 32 (prep_x below).
template <class W>
struct Dot {
  template <int R, int NB>
  static MMRT_ALWAYS_INLINE void step(__m512 (&acc)[R][NB], const typename W::T* w, int64_t ldw,
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

  template <int R, int NB>
  static void tile(const GemvArgs& a, int64_t o, int64_t j0) {
    tile_steps<Dot, 32, R, NB>(a, o, j0, static_cast<const typename W::T*>(a.w) + o * a.ldw,
                               reinterpret_cast<const uint16_t*>(a.x) + j0 * a.ldx);
  }
};

// x [n, k] f32 -> bf16 bits (round to nearest even) [n, xp_stride], zero padded. xp_stride
// counts bf16 elements; the caller's buffer (sized for floats) is large enough.
void prep_x(const float* x, int64_t ldx, int64_t n, int64_t k, float* xp, int64_t xp_stride) {
  auto* dst = reinterpret_cast<uint16_t*>(xp);
  for_x_blocks32(n, k, xp_stride, [&](int64_t j, int64_t kb, __mmask16 m0, __mmask16 m1) {
    const __m512 lo = _mm512_maskz_loadu_ps(m0, x + j * ldx + kb);
    const __m512 hi = _mm512_maskz_loadu_ps(m1, x + j * ldx + kb + 16);
    _mm512_store_si512(dst + j * xp_stride + kb,
                       reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  });
}

// Blocked bf16 weights (PackedLinear::blocked()): a block of 64 output channels is
// [kp / 2][64][2], so one input pair is 256 contiguous bytes: four vectors of 16 channels x 2
// weights, each one vdpbf16ps against the pair of x broadcast. NR input rows at once (each
// block is read once per group of rows; a second group finds it in L2).
template <int NR>
MMRT_ALWAYS_INLINE void blocked_rows(const uint16_t* wb, int64_t pairs, const uint16_t* x,
                                     int64_t ldx, __m512 (&acc)[NR][4]) {
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* w = wb + p * 128;
    __m512bh wv[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) wv[q] = reinterpret_cast<__m512bh>(_mm512_load_si512(w + q * 32));
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      uint32_t pair;
      std::memcpy(&pair, x + r * ldx + 2 * p, 4);
      const auto xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_dpbf16_ps(acc[r][q], wv[q], xv);
    }
  }
}

// One row alone (decode of one sequence): two pairs per iteration into two sets of
// accumulators, so eight dot-product chains are in flight.
MMRT_ALWAYS_INLINE void blocked_row1(const uint16_t* wb, int64_t pairs, const uint16_t* x,
                                     __m512 (&acc)[1][4]) {
  __m512 a[2][4];
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) a[0][q] = a[1][q] = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + 2 <= pairs; p += 2) {
    uint32_t x2[2];
    std::memcpy(x2, x + 2 * p, 8);
#pragma GCC unroll 2
    for (int u = 0; u < 2; ++u) {
      const uint16_t* w = wb + (p + u) * 128;
      const auto xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(x2[u])));
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q)
        a[u][q] = _mm512_dpbf16_ps(a[u][q],
                                   reinterpret_cast<__m512bh>(_mm512_load_si512(w + q * 32)), xv);
    }
  }
  for (; p < pairs; ++p) {
    uint32_t pair;
    std::memcpy(&pair, x + 2 * p, 4);
    const auto xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q)
      a[0][q] = _mm512_dpbf16_ps(
          a[0][q], reinterpret_cast<__m512bh>(_mm512_load_si512(wb + p * 128 + q * 32)), xv);
  }
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) acc[0][q] = _mm512_add_ps(a[0][q], a[1][q]);
}

template <int NR>
MMRT_ALWAYS_INLINE void blocked_store(const GemvArgs& a, int64_t ob, int64_t o1, int64_t j0,
                                      __m512 (&acc)[NR][4]) {
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const int64_t c0 = ob + q * 16;
    if (c0 >= o1) break;
    const auto m = static_cast<__mmask16>(o1 - c0 >= 16 ? 0xffff : (1u << (o1 - c0)) - 1);
    const __m512 sc = a.scale ? _mm512_maskz_loadu_ps(m, a.scale + c0) : _mm512_set1_ps(1.f);
    const __m512 bi = a.bias ? _mm512_maskz_loadu_ps(m, a.bias + c0) : _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r)
      _mm512_mask_storeu_ps(a.y + (j0 + r) * a.ldy + c0, m, _mm512_fmadd_ps(acc[r][q], sc, bi));
  }
}

void gemv_bf16_blocked(const GemvArgs& a, int64_t o0, int64_t o1) {
  const auto* w = static_cast<const uint16_t*>(a.w);
  const auto* x = reinterpret_cast<const uint16_t*>(a.x);
  const int64_t kp = a.ldw, pairs = kp / 2;
  constexpr int64_t kB = PackedLinear::kBlockedOut;
  for (int64_t ob = o0; ob < o1; ob += kB) {
    const uint16_t* wb = w + PackedLinear::blocked_offset(ob, 0, kp);
    int64_t j0 = 0;
    if (a.n == 1 && !a.invariant) {  // (its two accumulator sets sum in another order)
      __m512 acc[1][4];
      blocked_row1(wb, pairs, x, acc);
      blocked_store<1>(a, ob, o1, 0, acc);
      continue;
    }
    for (; j0 + 4 <= a.n; j0 += 4) {
      __m512 acc[4][4];
      blocked_rows<4>(wb, pairs, x + j0 * a.ldx, a.ldx, acc);
      blocked_store<4>(a, ob, o1, j0, acc);
    }
    for (; j0 + 2 <= a.n; j0 += 2) {
      __m512 acc[2][4];
      blocked_rows<2>(wb, pairs, x + j0 * a.ldx, a.ldx, acc);
      blocked_store<2>(a, ob, o1, j0, acc);
    }
    for (; j0 < a.n; ++j0) {
      __m512 acc[1][4];
      blocked_rows<1>(wb, pairs, x + j0 * a.ldx, a.ldx, acc);
      blocked_store<1>(a, ob, o1, j0, acc);
    }
  }
}

}  // namespace

const LinearKernels& linear_kernels_avx512bf16() {
  static const LinearKernels t = [] {
    LinearKernels k = linear_kernels_avx512();
    k.isa = "avx512bf16";
    k.gemv_bf16 = gemv_rows<Dot<Bf16W>, kGroup>;
    k.gemv_i8 = gemv_rows<Dot<I8W>, kGroup>;
    k.gemv_bf16_blocked = gemv_bf16_blocked;
    k.prep_x_bf16 = prep_x;
    k.gemv_x_bf16 = true;
    k.native_bf16_gemm = true;
    return k;
  }();
  return t;
}

}  // namespace mmrt::kernels::detail
