// AVX-512 (F) kernels of resize_like_torchvision. The lanes are independent output values that
// share one weight: 16 source rows in the horizontal pass (16x16 blocks are transposed in
// registers on the way in and back on the way out), 16 consecutive values of a row in the
// vertical pass.
// Each lane then runs exactly the scalar sequence of resize_torch_impl.h: _mm512_mul_ps +
// _mm512_add_ps where torch rounds twice, _mm512_fmadd_ps where it fused (this file is compiled
// with -ffp-contract=off, so GCC fuses nothing else). Called only when the CPU has AVX-512.
// GCC 12's AVX-512 intrinsics merge into deliberately undefined registers and report them under
// -Wuninitialized when inlined (a false positive; see src/media/CMakeLists.txt).
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>

#include "media/resize_torch_impl.h"

namespace mmrt::media::detail {
namespace {

constexpr int kLanes = 16;

// Scratch: the 16 source rows transposed, t[k * 16 + r] = row r's value k (k = 3 * x + c; 16
// values of slack for the last chunk), then the horizontal outputs o[k * 16 + r] likewise.
size_t scratch_avx512(const TorchAxis& a) {
  return (3 * static_cast<size_t>(a.in_size) + kLanes + 3 * static_cast<size_t>(a.out_size) +
          kLanes) *
         kLanes;
}

// In-register transpose: r[i] lane j <-> r[j] lane i. Shuffles only (gathers are slow on CPUs
// with the Gather Data Sampling mitigation).
inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int p = 0; p < 8; ++p) {
    t[2 * p] = _mm512_unpacklo_ps(r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm512_unpackhi_ps(r[2 * p], r[2 * p + 1]);
  }
  // Now r[4q + m], 128-bit lane l, holds column 4l + m of rows 4q .. 4q + 3.
  for (int q = 0; q < 4; ++q) {
    const int b = 4 * q;
    r[b] = _mm512_shuffle_ps(t[b], t[b + 2], 0x44);
    r[b + 1] = _mm512_shuffle_ps(t[b], t[b + 2], 0xee);
    r[b + 2] = _mm512_shuffle_ps(t[b + 1], t[b + 3], 0x44);
    r[b + 3] = _mm512_shuffle_ps(t[b + 1], t[b + 3], 0xee);
  }
  // A 4x4 transpose of 128-bit lanes within {r[m], r[4 + m], r[8 + m], r[12 + m]}.
  for (int m = 0; m < 4; ++m) {
    const __m512 u0 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x44);
    const __m512 u1 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xee);
    const __m512 u2 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x44);
    const __m512 u3 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xee);
    t[m] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    t[4 + m] = _mm512_shuffle_f32x4(u0, u2, 0xdd);
    t[8 + m] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    t[12 + m] = _mm512_shuffle_f32x4(u1, u3, 0xdd);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

void horizontal_avx512(const uint8_t* src, size_t src_stride, int rows, float* dst,
                       size_t dst_stride, const TorchAxis& a, float* scratch) {
  const uint8_t* in[kLanes];  // rows past `rows` repeat row 0; their outputs are dropped
  for (int r = 0; r < kLanes; ++r) in[r] = src + src_stride * static_cast<size_t>(r < rows ? r : 0);
  float* t = scratch;
  float* o = scratch + (3 * static_cast<size_t>(a.in_size) + kLanes) * kLanes;
  const int out = a.out_size, taps = a.taps;
  int done = 3 * a.first[0];  // source values transposed so far: [3 * first[0], done)
  for (int i = 0; i < out; ++i) {
    const int x0 = a.first[i], n = a.count[i], fused = a.fused[i];
    for (; done < 3 * (x0 + n); done += kLanes) {  // reads up to 15 bytes past a row
      __m512 v[kLanes];
      for (int r = 0; r < kLanes; ++r)
        v[r] = _mm512_cvtepi32_ps(
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in[r] + done))));
      transpose16(v);
      for (int k = 0; k < kLanes; ++k)
        _mm512_store_ps(t + static_cast<size_t>(done + k) * kLanes, v[k]);
    }
    const float* p = t + static_cast<size_t>(3 * x0) * kLanes;
    const float* w = &a.w[static_cast<size_t>(i) * taps];
    __m512 wj = _mm512_set1_ps(w[0]);
    __m512 o0 = _mm512_mul_ps(_mm512_load_ps(p), wj);
    __m512 o1 = _mm512_mul_ps(_mm512_load_ps(p + 16), wj);
    __m512 o2 = _mm512_mul_ps(_mm512_load_ps(p + 32), wj);
    int j = 1;
    for (; j < fused; ++j) {
      const float* q = p + static_cast<size_t>(j) * 3 * kLanes;
      wj = _mm512_set1_ps(w[j]);
      o0 = _mm512_add_ps(o0, _mm512_mul_ps(_mm512_load_ps(q), wj));
      o1 = _mm512_add_ps(o1, _mm512_mul_ps(_mm512_load_ps(q + 16), wj));
      o2 = _mm512_add_ps(o2, _mm512_mul_ps(_mm512_load_ps(q + 32), wj));
    }
    for (; j < n; ++j) {
      const float* q = p + static_cast<size_t>(j) * 3 * kLanes;
      wj = _mm512_set1_ps(w[j]);
      o0 = _mm512_fmadd_ps(_mm512_load_ps(q), wj, o0);
      o1 = _mm512_fmadd_ps(_mm512_load_ps(q + 16), wj, o1);
      o2 = _mm512_fmadd_ps(_mm512_load_ps(q + 32), wj, o2);
    }
    float* d = o + static_cast<size_t>(3 * i) * kLanes;
    _mm512_store_ps(d, o0);
    _mm512_store_ps(d + 16, o1);
    _mm512_store_ps(d + 32, o2);
  }
  // Back to rows, 16 values at a time (o has 16 values of slack).
  const int nvals = 3 * out;
  for (int k0 = 0; k0 < nvals; k0 += kLanes) {
    __m512 v[kLanes];
    for (int k = 0; k < kLanes; ++k)
      v[k] = _mm512_load_ps(o + static_cast<size_t>(k0 + k) * kLanes);
    transpose16(v);
    const int left = nvals - k0;
    const __mmask16 m =
        left >= kLanes ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
    for (int r = 0; r < rows; ++r)
      _mm512_mask_storeu_ps(dst + dst_stride * static_cast<size_t>(r) + k0, m, v[r]);
  }
}

inline __m128i to_bytes(__m512 v) {
  v = _mm512_min_ps(_mm512_max_ps(v, _mm512_setzero_ps()), _mm512_set1_ps(255.0f));
  return _mm512_cvtusepi32_epi8(
      _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// Vectors [k, k + 16 * V) of one output row.
template <int V>
inline void vertical_block(const float* const* rows, const float* w, int n, int fused, int k,
                           __m512 (&o)[V]) {
  __m512 wj = _mm512_set1_ps(w[0]);
  for (int q = 0; q < V; ++q) o[q] = _mm512_mul_ps(_mm512_loadu_ps(rows[0] + k + 16 * q), wj);
  int j = 1;
  for (; j < fused; ++j) {
    wj = _mm512_set1_ps(w[j]);
    for (int q = 0; q < V; ++q)
      o[q] = _mm512_add_ps(o[q], _mm512_mul_ps(_mm512_loadu_ps(rows[j] + k + 16 * q), wj));
  }
  for (; j < n; ++j) {
    wj = _mm512_set1_ps(w[j]);
    for (int q = 0; q < V; ++q)
      o[q] = _mm512_fmadd_ps(_mm512_loadu_ps(rows[j] + k + 16 * q), wj, o[q]);
  }
}

void vertical_avx512(const float* const* rows, const float* w, int n, int fused, uint8_t* dst,
                     int nvals) {
  int k = 0;
  for (; k + 64 <= nvals; k += 64) {
    __m512 o[4];
    vertical_block<4>(rows, w, n, fused, k, o);
    for (int q = 0; q < 4; ++q)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k + 16 * q), to_bytes(o[q]));
  }
  for (; k < nvals; k += 16) {  // rows are readable up to nvals rounded up to 16
    __m512 o[1];
    vertical_block<1>(rows, w, n, fused, k, o);
    const int left = nvals - k;
    const __mmask16 m =
        left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
    _mm_mask_storeu_epi8(dst + k, m, to_bytes(o[0]));
  }
}

const TorchResizeKernels kAvx512{"avx512", kLanes, scratch_avx512, horizontal_avx512,
                                 vertical_avx512};

}  // namespace

const TorchResizeKernels& avx512_torch_resize_kernels() {
  return kAvx512;
}

}  // namespace mmrt::media::detail
