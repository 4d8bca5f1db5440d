// AVX-512 (F+BW+VL) resize kernels. Exact: 32-bit integer products and sums of PIL's 22-bit
// fixed-point weights, same rounding and clamping; only the summation order differs, and integer
// addition does not care. Called only when cpu_features().has_avx512().
#include <immintrin.h>

#include <algorithm>

#include "media/resize_impl.h"

namespace mmrt::media::detail {
namespace {

inline __m512i finish(__m512i acc) {
  acc = _mm512_srai_epi32(acc, 22);
  return _mm512_max_epi32(acc, _mm512_setzero_si512());  // then unsigned-saturate to 255
}

// One output pixel's sum over all taps, as 4 partial RGBX groups (one per tap of each 4).
inline __m512i pixel_acc(const uint8_t* s, const int32_t* k, int taps, __m128i shuf) {
  __m512i a = _mm512_setzero_si512();
  for (int j = 0; j < taps; j += 4) {
    __m128i px =
        _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 3 * j)), shuf);
    a = _mm512_add_epi32(
        a, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(px), _mm512_loadu_si512(k + 4 * j)));
  }
  return a;
}

void horizontal_avx512(const uint8_t* src, uint8_t* dst, const HorizontalPlan& p) {
  // 4 source pixels RGB RGB RGB RGB -> RGB0 RGB0 RGB0 RGB0.
  const __m128i shuf = _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
  const __m128i pack = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m512i round = _mm512_set1_epi32(1 << 21);
  const int taps = p.taps, out = p.axis.out_size;
  const int32_t* kexp = p.kexp.data();
  const int32_t* start = p.start.data();
  for (int i = 0; i < out; i += 4) {
    const int32_t* k = kexp + static_cast<size_t>(i) * taps * 4;
    const size_t kstep = static_cast<size_t>(taps) * 4;
    __m512i a = pixel_acc(src + 3 * start[i], k, taps, shuf);
    __m512i b = pixel_acc(src + 3 * start[i + 1], k + kstep, taps, shuf);
    __m512i c = pixel_acc(src + 3 * start[i + 2], k + 2 * kstep, taps, shuf);
    __m512i d = pixel_acc(src + 3 * start[i + 3], k + 3 * kstep, taps, shuf);
    // Sum the four 128-bit groups of each accumulator: [a b c d] with one RGBX lane each.
    __m512i ab = _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    __m512i cd = _mm512_add_epi32(_mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(3, 1, 3, 1)));
    __m512i sum = _mm512_add_epi32(_mm512_shuffle_i32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_i32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
    __m128i bytes = _mm512_cvtusepi32_epi8(finish(_mm512_add_epi32(sum, round)));
    bytes = _mm_shuffle_epi8(bytes, pack);
    const int valid = std::min(4, out - i);
    _mm_mask_storeu_epi8(dst + 3 * i, static_cast<__mmask16>((1u << (3 * valid)) - 1), bytes);
  }
}

void vertical_avx512(const uint8_t* const* rows, const int32_t* k, int n, uint8_t* dst,
                     int nbytes) {
  const __m512i round = _mm512_set1_epi32(1 << 21);
  int i = 0;
  for (; i + 64 <= nbytes; i += 64) {
    __m512i a0 = round, a1 = round, a2 = round, a3 = round;
    for (int j = 0; j < n; ++j) {
      const __m512i kb = _mm512_set1_epi32(k[j]);
      const uint8_t* r = rows[j] + i;
      a0 = _mm512_add_epi32(
          a0, _mm512_mullo_epi32(
                  _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r))), kb));
      a1 = _mm512_add_epi32(
          a1,
          _mm512_mullo_epi32(
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 16))), kb));
      a2 = _mm512_add_epi32(
          a2,
          _mm512_mullo_epi32(
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 32))), kb));
      a3 = _mm512_add_epi32(
          a3,
          _mm512_mullo_epi32(
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 48))), kb));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm512_cvtusepi32_epi8(finish(a0)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 16), _mm512_cvtusepi32_epi8(finish(a1)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 32), _mm512_cvtusepi32_epi8(finish(a2)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 48), _mm512_cvtusepi32_epi8(finish(a3)));
  }
  for (; i < nbytes; i += 16) {  // masked tail: never touches bytes past nbytes
    const int left = nbytes - i;
    const __mmask16 m =
        left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
    __m512i a = round;
    for (int j = 0; j < n; ++j)
      a = _mm512_add_epi32(
          a, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, rows[j] + i)),
                                _mm512_set1_epi32(k[j])));
    _mm_mask_storeu_epi8(dst + i, m, _mm512_cvtusepi32_epi8(finish(a)));
  }
}

const ResizeKernels kAvx512{"avx512", horizontal_avx512, vertical_avx512};

}  // namespace

const ResizeKernels& avx512_resize_kernels() {
  return kAvx512;
}

}  // namespace mmrt::media::detail
