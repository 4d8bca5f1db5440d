// AVX2 kernels of resize_like_torchvision: resize_torch_avx512.cpp's scheme with 8 lanes (8
// source rows per horizontal block, transposed 8x8 in registers; 8 values per vertical vector).
// _mm256_mul_ps + _mm256_add_ps where torch rounds twice, _mm256_fmadd_ps where it fused; compiled
// with -ffp-contract=off. Called only when the CPU has AVX2 + FMA.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "media/resize_torch_impl.h"

namespace mmrt::media::detail {
namespace {

constexpr int kLanes = 8;

// Scratch as in resize_torch_avx512.cpp with 8 lanes: t[k * 8 + r], then o[k * 8 + r].
size_t scratch_avx2(const TorchAxis& a) {
  return (3 * static_cast<size_t>(a.in_size) + kLanes + 3 * static_cast<size_t>(a.out_size) +
          kLanes) *
         kLanes;
}

// In-register transpose: r[i] lane j <-> r[j] lane i.
inline void transpose8(__m256 (&r)[8]) {
  __m256 t[8];
  for (int p = 0; p < 4; ++p) {
    t[2 * p] = _mm256_unpacklo_ps(r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm256_unpackhi_ps(r[2 * p], r[2 * p + 1]);
  }
  // Now r[4q + m], 128-bit lane l, holds column 4l + m of rows 4q .. 4q + 3.
  for (int q = 0; q < 2; ++q) {
    const int b = 4 * q;
    r[b] = _mm256_shuffle_ps(t[b], t[b + 2], 0x44);
    r[b + 1] = _mm256_shuffle_ps(t[b], t[b + 2], 0xee);
    r[b + 2] = _mm256_shuffle_ps(t[b + 1], t[b + 3], 0x44);
    r[b + 3] = _mm256_shuffle_ps(t[b + 1], t[b + 3], 0xee);
  }
  for (int m = 0; m < 4; ++m) {
    t[m] = _mm256_permute2f128_ps(r[m], r[4 + m], 0x20);
    t[4 + m] = _mm256_permute2f128_ps(r[m], r[4 + m], 0x31);
  }
  for (int i = 0; i < 8; ++i) r[i] = t[i];
}

void horizontal_avx2(const uint8_t* src, size_t src_stride, int rows, float* dst, size_t dst_stride,
                     const TorchAxis& a, float* scratch) {
  const uint8_t* in[kLanes];  // rows past `rows` repeat row 0; their outputs are dropped
  for (int r = 0; r < kLanes; ++r) in[r] = src + src_stride * static_cast<size_t>(r < rows ? r : 0);
  float* t = scratch;
  float* o = scratch + (3 * static_cast<size_t>(a.in_size) + kLanes) * kLanes;
  const int out = a.out_size, taps = a.taps;
  int done = 3 * a.first[0];
  for (int i = 0; i < out; ++i) {
    const int x0 = a.first[i], n = a.count[i], fused = a.fused[i];
    for (; done < 3 * (x0 + n); done += kLanes) {  // reads up to 7 bytes past a row
      __m256 v[kLanes];
      for (int r = 0; r < kLanes; ++r)
        v[r] = _mm256_cvtepi32_ps(
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in[r] + done))));
      transpose8(v);
      for (int k = 0; k < kLanes; ++k)
        _mm256_store_ps(t + static_cast<size_t>(done + k) * kLanes, v[k]);
    }
    const float* p = t + static_cast<size_t>(3 * x0) * kLanes;
    const float* w = &a.w[static_cast<size_t>(i) * taps];
    __m256 wj = _mm256_set1_ps(w[0]);
    __m256 o0 = _mm256_mul_ps(_mm256_load_ps(p), wj);
    __m256 o1 = _mm256_mul_ps(_mm256_load_ps(p + 8), wj);
    __m256 o2 = _mm256_mul_ps(_mm256_load_ps(p + 16), wj);
    int j = 1;
    for (; j < fused; ++j) {
      const float* q = p + static_cast<size_t>(j) * 3 * kLanes;
      wj = _mm256_set1_ps(w[j]);
      o0 = _mm256_add_ps(o0, _mm256_mul_ps(_mm256_load_ps(q), wj));
      o1 = _mm256_add_ps(o1, _mm256_mul_ps(_mm256_load_ps(q + 8), wj));
      o2 = _mm256_add_ps(o2, _mm256_mul_ps(_mm256_load_ps(q + 16), wj));
    }
    for (; j < n; ++j) {
      const float* q = p + static_cast<size_t>(j) * 3 * kLanes;
      wj = _mm256_set1_ps(w[j]);
      o0 = _mm256_fmadd_ps(_mm256_load_ps(q), wj, o0);
      o1 = _mm256_fmadd_ps(_mm256_load_ps(q + 8), wj, o1);
      o2 = _mm256_fmadd_ps(_mm256_load_ps(q + 16), wj, o2);
    }
    float* d = o + static_cast<size_t>(3 * i) * kLanes;
    _mm256_store_ps(d, o0);
    _mm256_store_ps(d + 8, o1);
    _mm256_store_ps(d + 16, o2);
  }
  // Back to rows, 8 values at a time (o has 8 values of slack).
  const int nvals = 3 * out;
  for (int k0 = 0; k0 < nvals; k0 += kLanes) {
    __m256 v[kLanes];
    for (int k = 0; k < kLanes; ++k)
      v[k] = _mm256_load_ps(o + static_cast<size_t>(k0 + k) * kLanes);
    transpose8(v);
    const int left = nvals - k0;
    for (int r = 0; r < rows; ++r) {
      float* d = dst + dst_stride * static_cast<size_t>(r) + k0;
      if (left >= kLanes) {
        _mm256_storeu_ps(d, v[r]);
      } else {
        alignas(32) float tail[kLanes];
        _mm256_store_ps(tail, v[r]);
        std::memcpy(d, tail, sizeof(float) * left);
      }
    }
  }
}

inline __m256i to_ints(__m256 v) {
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(255.0f));
  return _mm256_cvttps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// 32 values [k, k + 32) of one output row, as bytes in order.
inline __m256i vertical32(const float* const* rows, const float* w, int n, int fused, int k) {
  __m256 o[4];
  __m256 wj = _mm256_set1_ps(w[0]);
  for (int q = 0; q < 4; ++q) o[q] = _mm256_mul_ps(_mm256_loadu_ps(rows[0] + k + 8 * q), wj);
  int j = 1;
  for (; j < fused; ++j) {
    wj = _mm256_set1_ps(w[j]);
    for (int q = 0; q < 4; ++q)
      o[q] = _mm256_add_ps(o[q], _mm256_mul_ps(_mm256_loadu_ps(rows[j] + k + 8 * q), wj));
  }
  for (; j < n; ++j) {
    wj = _mm256_set1_ps(w[j]);
    for (int q = 0; q < 4; ++q)
      o[q] = _mm256_fmadd_ps(_mm256_loadu_ps(rows[j] + k + 8 * q), wj, o[q]);
  }
  const __m256i p01 = _mm256_packs_epi32(to_ints(o[0]), to_ints(o[1]));
  const __m256i p23 = _mm256_packs_epi32(to_ints(o[2]), to_ints(o[3]));
  return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23),
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// One value at a time, for the tail (the rows may end right after nvals rounded up to 16).
inline uint8_t vertical1(const float* const* rows, const float* w, int n, int fused, int k) {
  float o = rows[0][k] * w[0];
  int j = 1;
  for (; j < fused; ++j) {
    const float p = rows[j][k] * w[j];
    o = o + p;
  }
  for (; j < n; ++j) o = std::fmaf(rows[j][k], w[j], o);
  return static_cast<uint8_t>(_mm256_cvtsi256_si32(to_ints(_mm256_set1_ps(o))));
}

void vertical_avx2(const float* const* rows, const float* w, int n, int fused, uint8_t* dst,
                   int nvals) {
  int k = 0;
  for (; k + 32 <= nvals; k += 32)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), vertical32(rows, w, n, fused, k));
  for (; k < nvals; ++k) dst[k] = vertical1(rows, w, n, fused, k);
}

const TorchResizeKernels kAvx2{"avx2", kLanes, scratch_avx2, horizontal_avx2, vertical_avx2};

}  // namespace

const TorchResizeKernels& avx2_torch_resize_kernels() {
  return kAvx2;
}

}  // namespace mmrt::media::detail
