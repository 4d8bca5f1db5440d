// Internal: the per-ISA kernel tables behind linear() and the GEMM back ends. Not a public
// header; ISA-specific files only define the functions declared here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/linear.h"

namespace mmrt::kernels::detail {

// One matrix-vector product over output rows [o0, o1):
//   y[j * ldy + o] = scale[o] * sum_k x[j, k] * W[o, k] + bias[o]   for j < n.
// W is row-major [out, ldw] in the kernel's element type (f32, bf16 bits, int8); `scale` is
// only used by the int8 kernel and `bias` may be null. `x` is the caller's f32 input [n, ldx]
// for the f32/int8 kernels; for the bf16 kernel it is the buffer written by prep_x_bf16, for
// gemv_i8_q8 the bytes written by prep_x_q8 (then ldx counts bytes).
struct GemvArgs {
  const float* x = nullptr;
  int64_t ldx = 0;
  int64_t n = 0;  // rows of x (any count; the kernels walk them in groups per weight tile)
  int64_t k = 0;  // in
  const void* w = nullptr;
  int64_t ldw = 0;
  const float* scale = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;
  // Batch invariance (CpuBackend::batch_invariant): each row through the same tile and
  // accumulator sets whatever `n` is.
  bool invariant = false;
};
using GemvFn = void (*)(const GemvArgs& a, int64_t o0, int64_t o1);

// The widest x layout any variant wants for bf16 weights is padded to this many elements.
constexpr int64_t kBf16XBlock = 32;

// Writes output channel `o` of a blocked layout (PackedLinear::blocked_offset_g<G>: bf16 pairs,
// G = 2, or int8 quads, G = 4): `row`'s `in` values down its column of the block, zeros from
// there to in_padded (a multiple of G).
template <int64_t G, typename T>
void put_blocked_row(T* blocks, int64_t o, const T* row, int64_t in, int64_t in_padded) {
  constexpr int64_t kB = PackedLinear::kBlockedOut;
  T* col = blocks + PackedLinear::blocked_offset_g<G>(o, 0, in_padded);
  int64_t k = 0;
  for (; k + G <= in; k += G) std::memcpy(col + k * kB, row + k, G * sizeof(T));
  if (k < in) {  // a last, partial group
    T tail[G] = {};
    std::memcpy(tail, row + k, static_cast<size_t>(in - k) * sizeof(T));
    std::memcpy(col + k * kB, tail, G * sizeof(T));
    k += G;
  }
  for (; k < in_padded; k += G) std::memset(col + k * kB, 0, G * sizeof(T));
}

// LinearOptions::act and accumulate on a row, with the element-wise ops' row epilogues
// (OpsFns::gemm_row_*): the GEMM's epilogue (with its scales and bias, rows still in cache) and
// the matrix-vector path (after its kernels) both finish rows this way.
struct OpsFns;
struct Finish {
  int act = 0;                  // OpsFns::gemm_row_*'s act: 0 none, 1 quick_gelu, 2 exact GELU
  bool accumulate = false;      // y += the row
  const OpsFns* ops = nullptr;  // the element-wise kernels of the backend's ISA
};
Finish finish_for(Isa cap, const LinearOptions& opt);
// `dst` (the product's row) gets the activation, then is added to y's row `yr` where
// fin.accumulate, else written there (dst may be yr then).
void finish_row(const Finish& fin, float* yr, const float* dst, int64_t cols);

struct LinearKernels {
  const char* isa;
  GemvFn gemv_f32;
  GemvFn gemv_bf16;
  GemvFn gemv_i8;
  // bf16 weights in PackedLinear's blocked layout (GemvArgs::w the first block, ldw the padded
  // `in`; o0 a multiple of PackedLinear::kBlockedOut), x as prep_x_bf16 writes it. Null where
  // the CPU has no AVX512-BF16 (weights are then never blocked).
  GemvFn gemv_bf16_blocked = nullptr;
  // Rewrites x [n, k] into the layout gemv_bf16 reads: [n, xp_stride] floats, zero padded.
  // Null when gemv_bf16 reads plain rows (then GemvArgs::x is the caller's x).
  void (*prep_x_bf16)(const float* x, int64_t ldx, int64_t n, int64_t k, float* xp,
                      int64_t xp_stride);
  // Widen int8 weights for the prefill GEMM (exact): to bf16 bits and to f32.
  void (*i8_to_bf16)(const int8_t* q, uint16_t* dst, size_t n);
  void (*i8_to_f32)(const int8_t* q, float* dst, size_t n);
  // Sums a streamed buffer (for the bandwidth probe); bytes is a multiple of 4 KiB.
  uint64_t (*stream_read)(const void* p, size_t bytes);
  // The prefill GEMM may run bf16 x bf16 -> f32 dot products (AVX512-BF16) for bf16/int8
  // weights; otherwise it converts weight panels to f32 and keeps x exact.
  bool native_bf16_gemm;
  // gemv_bf16 and gemv_i8 multiply bf16(x) (AVX512-BF16 dot products), x prepared by
  // prep_x_bf16 for both; else x stays f32 (and only gemv_bf16 reads prep_x_bf16's layout).
  bool gemv_x_bf16 = false;
  // int8 weights against x quantised per kQ8Block (Int8Activations::kQ8); null where the CPU
  // lacks AVX512-VNNI. prep_x_q8 writes x [n, k] as n rows of q8_row_bytes(k) bytes each.
  GemvFn gemv_i8_q8 = nullptr;
  // x [n, k] -> int8 [n, ldq] and one scale per row (Int8Gemm::kQ8Row); null without VNNI.
  // u8: each value stored as the u8 q + 128 (its sign bit flipped), for the blocked GEMM.
  void (*quantize_rows_q8)(const float* x, int64_t ldx, int64_t n, int64_t k, int8_t* q,
                           int64_t ldq, float* scale, bool u8) = nullptr;
  void (*prep_x_q8)(const float* x, int64_t ldx, int64_t n, int64_t k, void* xq,
                    int64_t row_bytes) = nullptr;
};

constexpr int64_t kQ8RecordBytes = 8;  // one Q8 record: int32 correction term, f32 scale
// Bytes of the int8 values of a prepared row (k rounded up to whole blocks); the records follow.
constexpr int64_t q8_value_bytes(int64_t k) {
  return (k + kQ8Block - 1) / kQ8Block * kQ8Block;
}
// Bytes of one prepared Q8 row of x: the int8 values of its blocks (k rounded up to whole blocks
// of kQ8Block), then one 8-byte record per block (the block's correction term and f32 scale),
// rounded up to a 64-byte line: 1.125 bytes per element, so a long row of x stays in L1 next to
// the streaming weights.
constexpr int64_t q8_row_bytes(int64_t k) {
  const int64_t records = q8_value_bytes(k) / kQ8Block * kQ8RecordBytes;
  return (q8_value_bytes(k) + records + 63) / 64 * 64;
}
// Fills gemv_i8_q8 / prep_x_q8 of `t` when this CPU has AVX512-VNNI (linear_avx512vnni.cpp).
void add_q8_kernels(LinearKernels& t);

const LinearKernels& linear_kernels_portable();
// Portable element loops (the vector variants use them for their tails).
void i8_to_bf16_portable(const int8_t* q, uint16_t* dst, size_t n);
void i8_to_f32_portable(const int8_t* q, float* dst, size_t n);
const LinearKernels& linear_kernels_avx2();
const LinearKernels& linear_kernels_avx512();
const LinearKernels& linear_kernels_avx512bf16();

// The table linear() uses at most `cap` (Backend::isa()).
const LinearKernels& linear_kernels(Isa cap);
using StreamReadFn = uint64_t (*)(const void*, size_t);
StreamReadFn stream_read_fn(Isa cap);

// The backend's GEMM state (one per Backend; see gemm_dnnl.cpp).
std::unique_ptr<GemmState, GemmStateDeleter> make_gemm_state(int threads);

// The prefill path of linear() (n rows, any n >= 1) and its description for linear_plan().
struct GemmChoice {
  const char* name;       // "onednn bf16", "onednn f32", "openblas f32", "onednn s8 (x q8 row)"
  bool bf16 = false;      // bf16 x bf16 products (x rounded to bf16)
  bool openblas = false;  // OpenBLAS sgemm instead of oneDNN
  bool s8 = false;        // int8 x int8 products, int32 sums (x quantised per row)
};
GemmChoice gemm_choice(const PackedLinear& w, Isa cap, const LinearOptions& opt);
void run_gemm(const float* x, int64_t n, const PackedLinear& w, float* y, const CpuBackend& be,
              const LinearOptions& opt);

// ---- GEMM back ends (single-threaded calls; linear_gemm.cpp threads them) ----
// y[m, ldy] = x[m, k] . W[n, k]^T with W rows strided by ldw (in elements). x and W have the
// same element type: f32, bf16 bits or int8 (`type`); y is f32, or int32 for int8. No bias.
// Primitives are cached per shape in the backend. Throws Unimplemented when this CPU/library cannot
// run the type. Runs on the calling pool thread with that thread's stream and scratch.
enum class GemmType : uint8_t { kF32, kBF16, kS8, kU8S8 };
// kS8: x and W int8, y int32 (exact sums); kU8S8: x uint8, W int8, y int32 (the products VNNI
// multiplies natively: blocked int8 weights use it, see PackedLinear::x_offset_sums). How W is
// stored: kNK rows of k (ldw apart: y =
// x . W^T), kKN rows of n (ldw apart: y = x . W), kBlocked in PackedLinear's blocked layout of
// the type (bf16 pairs or int8 quads; the panel's first block; ldw unused).
enum class WeightLayout : uint8_t { kNK, kKN, kBlocked };
void onednn_matmul(const CpuBackend& be, GemmType type, const void* x, int64_t m, int64_t k,
                   const void* w, int64_t n, int64_t ldw, void* y, int64_t ldy,
                   WeightLayout layout = WeightLayout::kNK);
// Whether oneDNN runs bf16 (or s8 x s8 -> s32) matmul natively here (checked once each by
// creating a primitive; a reference implementation does not count).
bool onednn_bf16_supported();
bool onednn_s8_supported();
// Whether oneDNN's kernels use AMX tiles here.
bool onednn_amx();
// Whether oneDNN runs u8 x s8 -> s32 natively on int8 weights in PackedLinear's blocked layout
// (the layout int8 kGemmOnly weights take where it does). s8 x s8 on that layout is native only
// on AMX: on AVX512-VNNI alone oneDNN 2.6 takes its reference kernel (about 2,600x slower,
// measured), so the blocked GEMM multiplies x as u8 = q + 128 and subtracts 128 x the channel's
// weight sum in its epilogue (exact in int32: the same sums as s8 x s8).
bool onednn_u8s8_blocked_supported();
// f32 only: y[m, ldy] = x[m, k] . W[n, k]^T (OpenBLAS sgemm, one thread).
void openblas_sgemm(const float* x, int64_t m, int64_t k, const float* w, int64_t n, int64_t ldw,
                    float* y, int64_t ldy);
// Make the libraries run single-threaded in the calling thread (our pool owns the cores).
void gemm_libraries_single_threaded();

}  // namespace mmrt::kernels::detail
