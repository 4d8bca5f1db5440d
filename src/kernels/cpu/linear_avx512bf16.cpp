// AVX512-BF16 decode kernels for bf16 and int8 weights: x is rounded to bf16 once per call (as
// the prefill GEMM already does on this CPU), and every 32 weights are one vdpbf16ps against
// 64 bytes of x (int8 weights are first widened to bf16, exactly). Int8 thereby loses the
// per-element f32 conversions of the f32-x kernel, its decode bottleneck. Against the f32-x kernel
// (linear_avx512.cpp) this halves the x bytes: a 8960-wide x then fits the 32 KiB L1 next to the
// weight stream (measured in a standalone loop, 2 threads, 1 GiB of weights: 49 vs 44 GB/s at in =
// 8960, 56 vs 53 at in = 1536), and decode rows round x exactly as prefill rows do, so a sequence
// gets the same products in either path. The other entries of the table are the AVX-512 ones.
#include <immintrin.h>

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

}  // namespace

const LinearKernels& linear_kernels_avx512bf16() {
  static const LinearKernels t = [] {
    LinearKernels k = linear_kernels_avx512();
    k.isa = "avx512bf16";
    k.gemv_bf16 = gemv_rows<Dot<Bf16W>, kGroup>;
    k.gemv_i8 = gemv_rows<Dot<I8W>, kGroup>;
    k.prep_x_bf16 = prep_x;
    k.gemv_x_bf16 = true;
    k.native_bf16_gemm = true;
    return k;
  }();
  return t;
}

}  // namespace mmrt::kernels::detail
