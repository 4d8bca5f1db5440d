// AVX2 resize kernels, exact in the same way as the AVX-512 ones (32-bit integer arithmetic on
// PIL's fixed-point weights). Called only when cpu_features().has_avx2().
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "media/resize_impl.h"

namespace mmrt::media::detail {
namespace {

// One output pixel: 2 taps per step, lanes RGBX RGBX; returns the RGBX sums in 4 lanes.
inline __m128i pixel_sum(const uint8_t* s, const int32_t* k, int taps, __m128i shuf) {
  __m256i a = _mm256_setzero_si256();
  for (int j = 0; j < taps; j += 2) {
    __m128i px =
        _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 3 * j)), shuf);
    a = _mm256_add_epi32(
        a, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(px),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + 4 * j))));
  }
  return _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
}

void horizontal_avx2(const uint8_t* src, uint8_t* dst, const HorizontalPlan& p) {
  const __m128i shuf = _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i pack = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m128i round = _mm_set1_epi32(1 << 21);
  const int taps = p.taps, out = p.axis.out_size;
  const size_t kstep = static_cast<size_t>(taps) * 4;
  for (int i = 0; i < out; i += 4) {
    const int32_t* k = p.kexp.data() + static_cast<size_t>(i) * kstep;
    __m128i s[4];
    for (int q = 0; q < 4; ++q)
      s[q] = _mm_srai_epi32(
          _mm_add_epi32(pixel_sum(src + 3 * p.start[i + q], k + q * kstep, taps, shuf), round), 22);
    __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(s[0], s[1]), _mm_packs_epi32(s[2], s[3]));
    bytes = _mm_shuffle_epi8(bytes, pack);
    const int valid = std::min(4, out - i);
    if (valid == 4) {  // exactly 12 bytes: other threads may own the next row
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + 3 * i), bytes);
      const int tail = _mm_extract_epi32(bytes, 2);
      std::memcpy(dst + 3 * i + 8, &tail, 4);
    } else {
      alignas(16) uint8_t tmp[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(tmp), bytes);
      std::memcpy(dst + 3 * i, tmp, static_cast<size_t>(3) * valid);
    }
  }
}

inline __m256i load8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

void vertical_avx2(const uint8_t* const* rows, const int32_t* k, int n, uint8_t* dst, int nbytes) {
  const __m256i round = _mm256_set1_epi32(1 << 21);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int i = 0;
  for (; i + 32 <= nbytes; i += 32) {
    __m256i a0 = round, a1 = round, a2 = round, a3 = round;
    for (int j = 0; j < n; ++j) {
      const __m256i kb = _mm256_set1_epi32(k[j]);
      const uint8_t* r = rows[j] + i;
      a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(load8(r), kb));
      a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(load8(r + 8), kb));
      a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(load8(r + 16), kb));
      a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(load8(r + 24), kb));
    }
    __m256i p01 = _mm256_packs_epi32(_mm256_srai_epi32(a0, 22), _mm256_srai_epi32(a1, 22));
    __m256i p23 = _mm256_packs_epi32(_mm256_srai_epi32(a2, 22), _mm256_srai_epi32(a3, 22));
    __m256i b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), b);
  }
  for (; i < nbytes; ++i) {
    int32_t acc = 1 << 21;
    for (int j = 0; j < n; ++j) acc += rows[j][i] * k[j];
    acc >>= 22;
    dst[i] = static_cast<uint8_t>(acc < 0 ? 0 : acc > 255 ? 255 : acc);
  }
}

const ResizeKernels kAvx2{"avx2", horizontal_avx2, vertical_avx2};

}  // namespace

const ResizeKernels& avx2_resize_kernels() {
  return kAvx2;
}

}  // namespace mmrt::media::detail
