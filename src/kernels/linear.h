// Linear layers y = x·Wᵀ + b (an op family: LinearOps): weights prepared once at load time in the
// backend's memory (PackedLinear), then one call per layer and step. The CPU backend's: small
// batches (decode) run our own memory-bound matrix-vector kernels that read each weight once for
// all rows; large batches (prefill) run a GEMM on oneDNN (or OpenBLAS for f32), threaded on its
// ThreadPool. See docs/kernels-gemm.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/isa.h"
#include "core/tensor.h"
#include "kernels/backend.h"

namespace mmrt::kernels {

// How a PackedLinear stores its weights.
//   kF32  f32, exact.
//   kBF16 bf16 (source rounded to nearest even).
//   kInt8 weight-only int8 with one f32 scale per output channel: scale = max|w_row| / 127,
//         q = round-half-even(w / scale) (symmetric; an all-zero row has scale 0).
//   kFp8  FP8 E4M3 (core/convert.h) with one f32 scale per output channel: scale =
//         max|w_row| / 448, q = e4m3(w / scale) (nearest even; an all-zero row has scale 0).
//         CUDA devices only (Hopper's FP8); the CPU packs it (for a device) but has no kernel.
enum class WeightFormat : uint8_t { kF32, kBF16, kInt8, kFp8 };
std::string_view weight_format_name(WeightFormat f);  // "f32", "bf16", "int8", "fp8"
size_t weight_format_bytes(WeightFormat f);           // bytes per stored weight: 4, 2, 1, 1

// Where packed weights live.
//   kCopy           memory of their own, on 2 MiB pages where the OS grants them. Decode
//                   streams every weight once per token; from a mapped file's 4 KiB pages the
//                   TLB misses cost ~20% of the decode rate (measured on the 2b-shape model).
//   kViewIfPossible a view of the source when it is one contiguous tensor already in the
//                   stored type (no load-time copy and no second copy in memory), else a copy.
//   kGemmOnly       a copy in the layout the backend's GEMM reads fastest, for weights that are
//                   only ever multiplied by many rows at once (LinearPath::kGemm; int8 with
//                   Int8Gemm::kQ8Row): the encoders' int8 blocks. The CPU stores int8 blocked
//                   (blocked()) where it multiplies int8 on oneDNN; linear() refuses other paths.
enum class WeightPlacement : uint8_t { kCopy, kViewIfPossible, kGemmOnly };

class PackedLinear {
 public:
  PackedLinear() = default;
  // What a backend's pack builds: weights [out, in] as stored, scales and bias f32 [out] (or
  // null), all in the memory of `device`.
  struct Parts {
    WeightFormat fmt = WeightFormat::kF32;
    int64_t in = 0, out = 0;
    const void* w = nullptr;
    std::shared_ptr<void> w_owner;
    std::shared_ptr<void> scale;  // [out] f32, kInt8 and kFp8 only
    std::shared_ptr<void> bias;   // [out] f32 or null
    bool zero_copy = false;
    bool blocked = false;  // bf16 or int8 weights in the GEMM's blocked layout (see blocked())
    std::shared_ptr<void> x_offset_sums;  // [out] int32, blocked int8 only (see x_offset_sums())
    Device device;
  };
  explicit PackedLinear(Parts p);
  // w: [out, in] (f32, f16 or bf16; any strides; host memory), bias: [out] or null (f32, f16
  // or bf16). Packed into `be`'s memory by its LinearOps::pack (the CPU backend converts and
  // quantises rows in parallel on its pool).
  static PackedLinear pack(const Backend& be, const Tensor& w, const Tensor* bias, WeightFormat fmt,
                           WeightPlacement place = WeightPlacement::kCopy);
  // Several weights sharing one input, concatenated along out (q|k|v, gate|up): one call
  // computes all of them into y[n, sum(out_i)]. `biases` is empty or has one entry per weight
  // (null entries mean zero bias for that part).
  static PackedLinear pack_concat(const Backend& be, std::span<const Tensor* const> ws,
                                  std::span<const Tensor* const> biases, WeightFormat fmt,
                                  WeightPlacement place = WeightPlacement::kCopy);

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  WeightFormat format() const { return fmt_; }
  size_t weight_bytes() const;  // weights + scales as stored
  bool empty() const { return out_ == 0; }
  bool zero_copy() const { return zero_copy_; }  // weights are a view of the source tensor
  // bf16 weights stored as the CPU GEMM multiplies them (oneDNN's BA16a64b2a, where the CPU has
  // AVX512-BF16): output channels in blocks of kBlockedOut, each block [in_padded / 2][64][2]
  // (pairs of inputs side by side for the bf16 pair dot products), `in` padded to a multiple of
  // kBlockedIn and `out` to kBlockedOut with zeros. The GEMM then reads them as they are (no
  // copy of each weight panel per call: 1.06-1.5x the GEMM rate on weights that come from DRAM,
  // 32-512 rows), and the decode kernel streams each block once for all rows.
  // int8 weights packed WeightPlacement::kGemmOnly are blocked the same way for the int8 GEMM
  // (oneDNN's BA16a64b4a): quads of inputs side by side, `in` padded to kBlockedInI8.
  bool blocked() const { return blocked_; }
  // Blocked int8 weights: 128 x the sum of each output channel's int8 weights, [out] int32. The
  // GEMM multiplies x as u8 = q + 128 (the products AVX512-VNNI has) and subtracts these: the
  // exact int32 sums of q x w. Null otherwise.
  const int32_t* x_offset_sums() const { return static_cast<const int32_t*>(x_offset_sums_.get()); }
  static constexpr int64_t kBlockedOut = 64, kBlockedIn = 32, kBlockedInI8 = 64;
  // A blocked layout's `in` padded to kBlockedIn, and the offset of weight (o, k) in it.
  static constexpr int64_t blocked_in(int64_t in) {
    return (in + kBlockedIn - 1) / kBlockedIn * kBlockedIn;
  }
  static constexpr int64_t blocked_offset(int64_t o, int64_t k, int64_t in_padded) {
    return blocked_offset_g<2>(o, k, in_padded);
  }
  // The same for blocked int8 weights.
  static constexpr int64_t blocked_in_i8(int64_t in) {
    return (in + kBlockedInI8 - 1) / kBlockedInI8 * kBlockedInI8;
  }
  static constexpr int64_t blocked_offset_i8(int64_t o, int64_t k, int64_t in_padded) {
    return blocked_offset_g<4>(o, k, in_padded);
  }
  // Both layouts: blocks of kBlockedOut channels, groups of G inputs side by side in a channel.
  template <int64_t G>
  static constexpr int64_t blocked_offset_g(int64_t o, int64_t k, int64_t in_padded) {
    return (o / kBlockedOut) * in_padded * kBlockedOut + (k / G) * G * kBlockedOut +
           (o % kBlockedOut) * G + k % G;
  }
  bool has_bias() const { return bias_ != nullptr; }
  Device device() const { return device_; }  // where the packed weights live
  // Stored weights: row-major [out, in] (f32, bf16 bits or int8 values), or blocked().
  const void* weight_data() const { return w_; }
  // [out] f32 for kInt8 and kFp8, else null
  const float* scales() const { return static_cast<const float*>(scale_.get()); }
  const float* bias() const { return static_cast<const float*>(bias_.get()); }  // [out] or null
  // The stored weights as a tensor (f32 / bf16 / i8 / u8 E4M3 codes [out, in]): a view sharing
  // ownership, or for
  // blocked() weights a row-major copy in host memory.
  Tensor weight() const;

 private:
  WeightFormat fmt_ = WeightFormat::kF32;
  int64_t in_ = 0, out_ = 0;
  const void* w_ = nullptr;
  std::shared_ptr<void> w_owner_;
  std::shared_ptr<void> scale_;  // [out] f32
  std::shared_ptr<void> bias_;   // [out] f32
  bool zero_copy_ = false;
  bool blocked_ = false;
  std::shared_ptr<void> x_offset_sums_;  // [out] int32
  Device device_;
};

// Which path linear() takes; kAuto chooses by the number of rows (see gemv_max_rows).
enum class LinearPath : uint8_t { kAuto, kGemv, kGemm };
// Library for the f32 GEMM (bf16/int8 weights always use oneDNN).
enum class GemmLibrary : uint8_t { kAuto, kOneDnn, kOpenBlas };

// What the int8 matrix-vector kernels (decode) multiply the int8 weights with.
//   kQ8    x quantised on the fly per block of kQ8Block elements along `in`: scale =
//          max|x_block| / 127, q = round-half-even(x / scale) (symmetric, an all-zero block has
//          scale 0), multiplied as integers (AVX512-VNNI, four weights per lane and
//          instruction) and scaled per block in f32. The activation side of llama.cpp's Q8
//          dot products; worst-case error |x - dequant(q)| <= max|x_block| / 254 per element.
//          Used where the CPU has AVX512-VNNI, else as kFloat.
//   kFloat strictly weight-only: x as the other formats take it (bf16(x) on AVX512-BF16,
//          else f32).
// The GEMM path (prefill, n > gemv_max_rows) always multiplies bf16(x) or x, never q.
enum class Int8Activations : uint8_t { kQ8, kFloat };
constexpr int64_t kQ8Block = 64;

// What the GEMM path multiplies int8 weights with.
//   kBF16  bf16(x) against the weights widened to bf16 (exact widening): weight-only int8,
//          the speed of a bf16 GEMM (the language model's prefill).
//   kQ8Row x quantised per row (per token): scale = max|x_row| / 127, q = round-half-even(
//          x / scale) clamped to +-127 (a NaN or infinite row: scale NaN), multiplied as
//          integers with exact int32 sums (oneDNN s8 x s8 on AVX512-VNNI, about twice the bf16
//          GEMM's rate), then y = f32(sum) * scale_x * scale_w + b. The encoders' int8 layers.
//          Where the CPU has no VNNI (int8_q8_available), as kBF16.
enum class Int8Gemm : uint8_t { kBF16, kQ8Row };

// An activation linear() applies to its product before storing it (LinearOptions::act); the
// same functions as ops.h's quick_gelu and gelu_erf, bit for bit.
enum class LinearAct : uint8_t { kNone, kQuickGelu, kGeluErf };

struct LinearOptions {
  LinearPath path = LinearPath::kAuto;
  GemmLibrary f32_gemm = GemmLibrary::kAuto;
  Int8Activations int8_x = Int8Activations::kQ8;
  Int8Gemm int8_gemm = Int8Gemm::kBF16;
  // y = act(x·Wᵀ + b), or with `accumulate` y += act(x·Wᵀ + b) (a residual add). The same values
  // as linear() followed by the activation and the add as separate ops; the CPU's GEMM applies
  // both to each output tile while it is in cache, so y is written once and never re-read for
  // them (an encoder block's MLP output is 20 MB of f32 at 1,024 patches).
  LinearAct act = LinearAct::kNone;
  bool accumulate = false;
};

// Up to this many rows the matrix-vector kernels run (weights streamed once for all rows);
// beyond, the GEMM is faster (bench_linear `crossover`, 8960x1536: bf16 gemv 130 vs GEMM 109
// GFLOP/s at 6 rows, 117 vs 143 at 8; int8 209 vs 134 at 8, 193 vs 203 at 12).
// bf16 stays at 8 although the GEMM wins at 7-8 rows: the GEMM multiplies bf16(x), so a
// pure-decode step of 7-8 sequences would round differently from the same sequence alone.
constexpr int64_t gemv_max_rows(WeightFormat) {
  return 8;
}

// y[n, out] = x[n, in] · Wᵀ + b; f32 in and out, rows contiguous, f32 accumulation.
// Where the CPU has AVX512-BF16, bf16 weights multiply x rounded to bf16 on both paths, and
// int8 weights on the GEMM path; int8 decode multiplies x quantised in blocks where the CPU has
// AVX512-VNNI (Int8Activations); elsewhere, and for f32 weights, x stays f32 (see linear_plan).
// x and y must not overlap; y is read first with LinearOptions::accumulate. Throws
// InvalidArgument on bad sizes.
void linear(const Backend& be, const float* x, int64_t n, const PackedLinear& w, float* y,
            const LinearOptions& opt = {});
// Tensor form: x f32 [n, in] (contiguous) -> new f32 [n, out].
Tensor linear(const Backend& be, const Tensor& x, const PackedLinear& w,
              const LinearOptions& opt = {});

// What linear() will do for n rows with these weights (for logs, benches and tests).
struct LinearPlan {
  bool gemv = true;                 // matrix-vector kernels (else GEMM)
  std::string kernel;               // e.g. "avx512 gemv", "onednn bf16", "openblas f32"
  bool x_rounded_to_bf16 = false;   // the kernel multiplies bf16(x) (bf16/int8 weights only)
  bool x_quantised_q8 = false;      // the kernel multiplies x quantised per kQ8Block (int8 only)
  bool x_quantised_q8_row = false;  // ... x quantised per row (Int8Gemm::kQ8Row, GEMM only)
};
LinearPlan linear_plan(const Backend& be, int64_t n, const PackedLinear& w,
                       const LinearOptions& opt = {});

// Whether the kernel variant used at most `cap` has the Int8Activations::kQ8 decode kernel
// (AVX512-VNNI).
bool int8_q8_available(Isa cap);

// The CPU kernel variant used at most `cap` (CpuBackend::isa()): "avx512bf16", "avx512", "avx2"
// or "portable".
const char* linear_isa(Isa cap);

// A device's linear kernels (arguments as above).
struct LinearOps {
  PackedLinear (*pack)(const Backend&, std::span<const Tensor* const> ws,
                       std::span<const Tensor* const> biases, WeightFormat fmt,
                       WeightPlacement place);
  void (*linear)(const Backend&, const float* x, int64_t n, const PackedLinear& w, float* y,
                 const LinearOptions& opt);
  LinearPlan (*plan)(const Backend&, int64_t n, const PackedLinear& w, const LinearOptions& opt);
};

}  // namespace mmrt::kernels
