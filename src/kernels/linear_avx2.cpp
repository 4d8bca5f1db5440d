// AVX2+FMA matrix-vector kernels (decode), the same scheme as linear_avx512.cpp with 8-lane
// vectors and 16 registers: tiles of R output rows x NB input rows, bf16 widened by shift/mask
// against x prepared in even/odd order per 16-element block.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels/linear_impl.h"

namespace mmrt::kernels::detail {

namespace {

using TileFn = void (*)(const GemvArgs&, int64_t o, int64_t j0);
constexpr int kGroup = 8;
constexpr int64_t kPrefetch = 1024;

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline void store_tile_out(const GemvArgs& a, int64_t o, int64_t j0, int r, int j, float s) {
  const int64_t oo = o + r;
  if (a.scale) s *= a.scale[oo];
  if (a.bias) s += a.bias[oo];
  a.y[(j0 + j) * a.ldy + oo] = s;
}

inline float bf16_to_f32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// x rows in the prepared layout hold the tail (k % 16 elements) in natural order after the last
// full block; see prep_x_bf16.
struct Bf16 {
  template <int R, int NB>
  static void tile(const GemvArgs& a, int64_t o, int64_t j0) {
    const auto* w = static_cast<const uint16_t*>(a.w) + o * a.ldw;
    const float* x = a.x + j0 * a.ldx;
    __m256 acc[R][NB];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm256_setzero_ps();
    const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    int64_t k = 0;
    for (; k + 16 <= a.k; k += 16) {
      __m256 we[R], wo[R];
      for (int r = 0; r < R; ++r) {
        const uint16_t* p = w + r * a.ldw + k;
        _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetch, _MM_HINT_T0);
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        we[r] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        wo[r] = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
      }
      for (int j = 0; j < NB; ++j) {
        const __m256 xe = _mm256_load_ps(x + j * a.ldx + k);
        const __m256 xo = _mm256_load_ps(x + j * a.ldx + k + 8);
        for (int r = 0; r < R; ++r) {
          acc[r][j] = _mm256_fmadd_ps(we[r], xe, acc[r][j]);
          acc[r][j] = _mm256_fmadd_ps(wo[r], xo, acc[r][j]);
        }
      }
    }
    float out[R][NB];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NB; ++j) out[r][j] = hsum(acc[r][j]);
    for (; k < a.k; ++k)
      for (int r = 0; r < R; ++r) {
        const float wv = bf16_to_f32(w[r * a.ldw + k]);
        for (int j = 0; j < NB; ++j) out[r][j] += wv * x[j * a.ldx + k];
      }
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NB; ++j) store_tile_out(a, o, j0, r, j, out[r][j]);
  }
};

struct I8 {
  template <int R, int NB>
  static void tile(const GemvArgs& a, int64_t o, int64_t j0) {
    const auto* w = static_cast<const int8_t*>(a.w) + o * a.ldw;
    const float* x = a.x + j0 * a.ldx;
    __m256 acc[R][NB];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= a.k; k += 8) {
      __m256 wf[R];
      for (int r = 0; r < R; ++r) {
        const int8_t* p = w + r * a.ldw + k;
        if ((k & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetch, _MM_HINT_T0);
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
        wf[r] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
      }
      for (int j = 0; j < NB; ++j) {
        const __m256 xv = _mm256_loadu_ps(x + j * a.ldx + k);
        for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(wf[r], xv, acc[r][j]);
      }
    }
    float out[R][NB];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NB; ++j) out[r][j] = hsum(acc[r][j]);
    for (; k < a.k; ++k)
      for (int r = 0; r < R; ++r) {
        const float wv = static_cast<float>(w[r * a.ldw + k]);
        for (int j = 0; j < NB; ++j) out[r][j] += wv * x[j * a.ldx + k];
      }
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NB; ++j) store_tile_out(a, o, j0, r, j, out[r][j]);
  }
};

struct F32 {
  template <int R, int NB>
  static void tile(const GemvArgs& a, int64_t o, int64_t j0) {
    const auto* w = static_cast<const float*>(a.w) + o * a.ldw;
    const float* x = a.x + j0 * a.ldx;
    __m256 acc[R][NB];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= a.k; k += 8) {
      __m256 wf[R];
      for (int r = 0; r < R; ++r) {
        const float* p = w + r * a.ldw + k;
        if ((k & 15) == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetch, _MM_HINT_T0);
        wf[r] = _mm256_loadu_ps(p);
      }
      for (int j = 0; j < NB; ++j) {
        const __m256 xv = _mm256_loadu_ps(x + j * a.ldx + k);
        for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(wf[r], xv, acc[r][j]);
      }
    }
    float out[R][NB];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NB; ++j) out[r][j] = hsum(acc[r][j]);
    for (; k < a.k; ++k)
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < NB; ++j) out[r][j] += w[r * a.ldw + k] * x[j * a.ldx + k];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NB; ++j) store_tile_out(a, o, j0, r, j, out[r][j]);
  }
};

template <class K, int R, int... I>
constexpr std::array<TileFn, sizeof...(I)> tiles(std::integer_sequence<int, I...>) {
  return {&K::template tile<R, I + 1>...};
}

// Register budget (16): 4 rows for single-row input, 2 rows for up to 4 input rows, then one
// row against groups of up to 8 input rows.
template <class K>
void gemv(const GemvArgs& a, int64_t o0, int64_t o1) {
  static constexpr auto t4 = tiles<K, 4>(std::make_integer_sequence<int, 1>{});
  static constexpr auto t2 = tiles<K, 2>(std::make_integer_sequence<int, 4>{});
  static constexpr auto t1 = tiles<K, 1>(std::make_integer_sequence<int, kGroup>{});
  const int R = a.n == 1 ? 4 : a.n <= 4 ? 2 : 1;
  const TileFn* tr = R == 4 ? t4.data() : R == 2 ? t2.data() : t1.data();
  int64_t o = o0;
  for (; o + R <= o1; o += R)
    for (int64_t j0 = 0; j0 < a.n; j0 += kGroup)
      tr[std::min<int64_t>(kGroup, a.n - j0) - 1](a, o, j0);
  for (; o < o1; ++o)
    for (int64_t j0 = 0; j0 < a.n; j0 += kGroup)
      t1[std::min<int64_t>(kGroup, a.n - j0) - 1](a, o, j0);
}

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
                               .gemv_f32 = gemv<F32>,
                               .gemv_bf16 = gemv<Bf16>,
                               .gemv_i8 = gemv<I8>,
                               .prep_x_bf16 = prep_x_bf16,
                               .i8_to_bf16 = i8_to_bf16_portable,
                               .i8_to_f32 = i8_to_f32,
                               .stream_read = stream_read,
                               .native_bf16_gemm = false};
  return t;
}

}  // namespace mmrt::kernels::detail
