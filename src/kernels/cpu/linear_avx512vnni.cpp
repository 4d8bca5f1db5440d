// AVX512-VNNI decode kernel for int8 weights against x quantised per block of 64 (Int8Activations
// ::kQ8). vpdpbusd multiplies 64 unsigned by 64 signed bytes into 16 int32 lanes in one
// instruction, so the weights are never widened: per 64 weights one xor, one vpdpbusd, one
// conversion and one FMA, where the bf16(x) kernel needs ten widening operations and two dot
// products. That widening, not memory, bounded the int8 decode rate (~70 % of bandwidth).
//
// vpdpbusd wants one unsigned operand. The weights are made unsigned (q + 128, an xor with 0x80)
// and the surplus 128 * sum(x_q) of each block is removed exactly in the integer domain: the
// accumulator starts at -8 * sum(x_q) in all 16 lanes, whose lane sum is -128 * sum(x_q). Every
// lane stays below 2^24 in magnitude, so its conversion to f32 is exact; the only roundings are
// the quantisation of x and the f32 sums over blocks.
#include <immintrin.h>

#include "core/cpu.h"
#include "kernels/cpu/gemv_avx512.h"
#include "kernels/cpu/q8_avx512.h"

namespace mmrt::kernels::detail {

namespace {

constexpr int kGroup = 8;  // input rows per tile pass
static_assert(kQ8Block == 64, "the kernel takes one block per 64-byte step");

// A prepared row (q8_row_bytes): the int8 values of all blocks, 64 per block, then one record
// per block. Keeping the records apart nearly halves the row's footprint in L1 against a
// 64-byte record next to every block (x of the 8960-wide down projection: 10 KB, not 18 KB);
// measured gain within the host's noise (docs/kernels-gemm.md).
struct Record {
  int32_t init;  // -8 * sum(q) of the block: the accumulator's start in every lane
  float scale;   // max|x_block| / 127
};
static_assert(sizeof(Record) == kQ8RecordBytes, "q8_row_bytes counts kQ8RecordBytes per record");
// Where a tile finds the rows of x: q at q + j * ldx + k, records at rec + j * ldx + k / 64.
struct Q8Rows {
  const char* q;
  const Record* rec;
};
struct Q8 {
  template <int R, int NB>
  static MMRT_ALWAYS_INLINE void step(__m512 (&acc)[R][NB], const int8_t* w, int64_t ldw,
                                      const Q8Rows* x, int64_t ldx, int64_t k, __mmask64 mask) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    const bool full = mask == ~__mmask64{0};
    __m512i wu[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const int8_t* p = w + r * ldw + k;
      // Masked-off weights load as 0 (-> 128 after the flip) and meet x's zero padding.
      const __m512i v = full ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(mask, p);
      wu[r] = _mm512_xor_si512(v, flip);
    }
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      const Record* rec =
          reinterpret_cast<const Record*>(reinterpret_cast<const char*>(x->rec) + j * ldx) +
          k / kQ8Block;
      const __m512i xv = _mm512_load_si512(x->q + j * ldx + k);
      const __m512i init = _mm512_set1_epi32(rec->init);
      const __m512 sc = _mm512_set1_ps(rec->scale);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512i d = _mm512_dpbusd_epi32(init, wu[r], xv);
        acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), sc, acc[r][j]);
      }
    }
  }

  template <int R, int NB>
  static void tile(const GemvArgs& a, int64_t o, int64_t j0) {
    const char* x = reinterpret_cast<const char*>(a.x) + j0 * a.ldx;
    const Q8Rows rows{x, reinterpret_cast<const Record*>(x + q8_value_bytes(a.k))};
    tile_steps<Q8, 64, R, NB>(a, o, j0, static_cast<const int8_t*>(a.w) + o * a.ldw, &rows);
  }
};

// x [n, k] f32 -> n prepared rows of row_bytes (q8_row_bytes(k)): per block of 64, scale =
// max|x| / 127 and q = round-half-even(x / scale) (the f32 division, as the reference does).
void prep_x(const float* x, int64_t ldx, int64_t n, int64_t k, void* xq, int64_t row_bytes) {
  for (int64_t j = 0; j < n; ++j) {
    char* row = static_cast<char*>(xq) + j * row_bytes;
    auto* recs = reinterpret_cast<Record*>(row + q8_value_bytes(k));
    for (int64_t kb = 0; kb < k; kb += kQ8Block) {
      __m512 v[4];
      __m512 amax = _mm512_setzero_ps();
      __mmask16 nan = 0;
      for (int i = 0; i < 4; ++i) {
        const int64_t left = std::clamp<int64_t>(k - kb - 16 * i, 0, 16);
        const auto m = static_cast<__mmask16>((1u << left) - 1);
        v[i] = _mm512_maskz_loadu_ps(m, x + j * ldx + kb + 16 * i);
        q8_track(v[i], amax, nan);
      }
      const float scale = q8_scale(_mm512_reduce_max_ps(amax), nan != 0);
      char* blk = row + kb;
      __m512i sum = _mm512_setzero_si512();
      for (int i = 0; i < 4; ++i) {
        const __m512i q = q8_quantise(v[i], scale);
        sum = _mm512_add_epi32(sum, q);
        _mm_store_si128(reinterpret_cast<__m128i*>(blk + 16 * i), _mm512_cvtsepi32_epi8(q));
      }
      Record* rec = recs + kb / kQ8Block;
      rec->init = -8 * _mm512_reduce_add_epi32(sum);
      rec->scale = scale;
    }
  }
}

// x [n, k] f32 -> q [n, ldq] int8 and scale [n]: per row, scale = max|x_row| / 127 and
// q = round-half-even(x / scale), clamped to +-127 (as prep_x per block, for the GEMM path);
// stored as q + 128 (u8) where `u8`.
void quantize_rows(const float* x, int64_t ldx, int64_t n, int64_t k, int8_t* q, int64_t ldq,
                   float* scale, bool u8) {
  const __m128i flip = _mm_set1_epi8(static_cast<char>(u8 ? 0x80 : 0));
  for (int64_t j = 0; j < n; ++j) {
    const float* xr = x + j * ldx;
    __m512 amax = _mm512_setzero_ps();
    __mmask16 nan = 0;
    for (int64_t i = 0; i < k; i += 16) {
      const auto m = static_cast<__mmask16>((1u << std::min<int64_t>(16, k - i)) - 1);
      const __m512 v = _mm512_maskz_loadu_ps(m, xr + i);
      q8_track(v, amax, nan);
    }
    const float s = q8_scale(_mm512_reduce_max_ps(amax), nan != 0);
    scale[j] = s;
    for (int64_t i = 0; i < k; i += 16) {
      const auto m = static_cast<__mmask16>((1u << std::min<int64_t>(16, k - i)) - 1);
      const __m512i v = q8_quantise(_mm512_maskz_loadu_ps(m, xr + i), s);
      _mm_mask_storeu_epi8(q + j * ldq + i, m, _mm_xor_si128(_mm512_cvtsepi32_epi8(v), flip));
    }
  }
}

}  // namespace

void add_q8_kernels(LinearKernels& t) {
  if (!cpu_features().avx512vnni || !cpu_features().has_avx512()) return;
  t.gemv_i8_q8 = gemv_rows<Q8, kGroup>;
  t.prep_x_q8 = prep_x;
  t.quantize_rows_q8 = quantize_rows;
}

}  // namespace mmrt::kernels::detail
