// AVX-512 matrix-vector kernels (decode). Memory-bound: each weight byte is loaded from memory
// once per call; a tile of one output row x NB input rows keeps its accumulators in registers,
// so batches of up to 8 rows cost one weight load (larger batches revisit the row from L1).
// bf16 weights are widened with a shift (even elements) and a mask (odd elements); x is
// prepared once per call in the matching even/odd order, so no shuffles run in the loop.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels/cpu/gemv_avx512.h"

namespace mmrt::kernels::detail {

namespace {

constexpr int kGroup = 8;  // input rows per tile pass

inline uint64_t hsum_u64(__m512i v) {
  const __m512i s = _mm512_add_epi64(v, _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m256i t = _mm512_castsi512_si256(s);
  const __m128i u = _mm_add_epi64(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(u)) +
         static_cast<uint64_t>(_mm_extract_epi64(u, 1));
}

// ---- bf16: 32 weights per 64-byte line ----
struct Bf16 {
  // One 32-wide step at k; `mask` selects the valid weights (x is zero padded past a.k).
  template <int R, int NB>
  static MMRT_ALWAYS_INLINE void step(__m512 (&acc)[R][NB], const uint16_t* w, int64_t ldw,
                                      const float* x, int64_t ldx, int64_t k, __mmask32 mask) {
    const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    __m512 we[R], wo[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512i v = _mm512_maskz_loadu_epi16(mask, w + r * ldw + k);
      we[r] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      wo[r] = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
    }
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      const __m512 xe = _mm512_load_ps(x + j * ldx + k);
      const __m512 xo = _mm512_load_ps(x + j * ldx + k + 16);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        acc[r][j] = _mm512_fmadd_ps(we[r], xe, acc[r][j]);
        acc[r][j] = _mm512_fmadd_ps(wo[r], xo, acc[r][j]);
      }
    }
  }
  template <int R, int NB>
  static void tile(const GemvArgs& a, int64_t o, int64_t j0) {
    // x: [NB, ldx] even/odd-split blocks of 32 (prep_x_bf16).
    tile_steps<Bf16, 32, R, NB>(a, o, j0, static_cast<const uint16_t*>(a.w) + o * a.ldw,
                                a.x + j0 * a.ldx);
  }
};

// ---- int8 (64 weights per line, scale applied at the end) and f32 (16 per line): weights
// widened to f32 16 at a time ----
inline __m512 load_w16(const int8_t* p, __mmask16 mask) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, p)));
}
inline __m512 load_w16(const float* p, __mmask16 mask) {
  return _mm512_maskz_loadu_ps(mask, p);
}

template <class T>
struct Wide16 {
  template <int R, int NB>
  static MMRT_ALWAYS_INLINE void step(__m512 (&acc)[R][NB], const T* w, int64_t ldw, const float* x,
                                      int64_t ldx, int64_t k, __mmask16 mask) {
    __m512 wf[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wf[r] = load_w16(w + r * ldw + k, mask);
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + j * ldx + k);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][j] = _mm512_fmadd_ps(wf[r], xv, acc[r][j]);
    }
  }
  template <int R, int NB>
  static void tile(const GemvArgs& a, int64_t o, int64_t j0) {
    tile_steps<Wide16, 16, R, NB>(a, o, j0, static_cast<const T*>(a.w) + o * a.ldw,
                                  a.x + j0 * a.ldx);
  }
};
using I8 = Wide16<int8_t>;
using F32 = Wide16<float>;

// x [n, k] -> per 32-element block: the 16 even-indexed values, then the 16 odd-indexed ones.
void prep_x_bf16(const float* x, int64_t ldx, int64_t n, int64_t k, float* xp, int64_t xp_stride) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for_x_blocks32(n, k, xp_stride, [&](int64_t j, int64_t kb, __mmask16 m0, __mmask16 m1) {
    const __m512 lo = _mm512_maskz_loadu_ps(m0, x + j * ldx + kb);
    const __m512 hi = _mm512_maskz_loadu_ps(m1, x + j * ldx + kb + 16);
    float* dst = xp + j * xp_stride + kb;
    _mm512_store_ps(dst, _mm512_permutex2var_ps(lo, even, hi));
    _mm512_store_ps(dst + 16, _mm512_permutex2var_ps(lo, odd, hi));
  });
}

void i8_to_bf16(const int8_t* q, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 f = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i))));
    // Exact in bf16: keep the high halves of the f32 bits.
    const __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(f), 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  i8_to_bf16_portable(q + i, dst + i, n - i);
}
void i8_to_f32(const int8_t* q, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i)))));
  i8_to_f32_portable(q + i, dst + i, n - i);
}

uint64_t stream_read(const void* p, size_t bytes) {
  const auto* c = static_cast<const char*>(p);
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i + 256 <= bytes; i += 256) {
    s0 = _mm512_xor_si512(s0, _mm512_load_si512(c + i));
    s1 = _mm512_xor_si512(s1, _mm512_load_si512(c + i + 64));
    s2 = _mm512_xor_si512(s2, _mm512_load_si512(c + i + 128));
    s3 = _mm512_xor_si512(s3, _mm512_load_si512(c + i + 192));
  }
  const __m512i s = _mm512_xor_si512(_mm512_xor_si512(s0, s1), _mm512_xor_si512(s2, s3));
  return hsum_u64(s);
}

}  // namespace

const LinearKernels& linear_kernels_avx512() {
  static const LinearKernels t = [] {
    LinearKernels k{.isa = "avx512",
                    .gemv_f32 = gemv_rows<F32, kGroup>,
                    .gemv_bf16 = gemv_rows<Bf16, kGroup>,
                    .gemv_i8 = gemv_rows<I8, kGroup>,
                    .prep_x_bf16 = prep_x_bf16,
                    .i8_to_bf16 = i8_to_bf16,
                    .i8_to_f32 = i8_to_f32,
                    .stream_read = stream_read,
                    .native_bf16_gemm = false};
    add_q8_kernels(k);
    return k;
  }();
  return t;
}

}  // namespace mmrt::kernels::detail
