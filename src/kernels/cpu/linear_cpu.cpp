// The CPU backend's linear layers: weight packing, kernel-variant selection, the decode mat-vec
// driver and the GEMM path.
#include "kernels/linear.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/convert.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/linear_impl.h"

namespace mmrt::kernels {

namespace {

// One row of a 2-D f32/f16/bf16 tensor as f32 (exact widening).
void row_to_f32(const Tensor& t, int64_t row, float* dst) {
  const int64_t n = t.dim(1), s0 = t.strides()[0], s1 = t.strides()[1];
  const auto* base = static_cast<const char*>(t.raw());
  if (t.dtype() == DType::kF32) {
    const auto* p = reinterpret_cast<const float*>(base) + row * s0;
    if (s1 == 1)
      std::memcpy(dst, p, static_cast<size_t>(n) * 4);
    else
      for (int64_t i = 0; i < n; ++i) dst[i] = p[i * s1];
    return;
  }
  const auto* p = reinterpret_cast<const uint16_t*>(base) + row * s0;
  const bool bf = t.dtype() == DType::kBF16;
  if (s1 == 1) {
    if (bf)
      bf16_to_f32(p, dst, static_cast<size_t>(n));
    else
      f16_to_f32(p, dst, static_cast<size_t>(n));
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    dst[i] = bf ? bf16_to_f32_scalar(p[i * s1]) : f16_to_f32_scalar(p[i * s1]);
}

void check_float_tensor(const Tensor& t, const char* what) {
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kF16 && t.dtype() != DType::kBF16)
    throw InvalidArgument(std::string("PackedLinear: ") + what + " must be f32, f16 or bf16, got " +
                          t.describe());
}

// Symmetric per-row int8: scale = max|w| / 127, q = round-half-even(w / scale).
// max|w| of a row to be quantised; InvalidArgument naming `what` for a weight that is not finite.
float row_amax(const float* w, int64_t n, int64_t row, const char* what) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(w[i]))
      throw InvalidArgument(std::string("PackedLinear: ") + what +
                            " quantisation needs finite weights; row " + std::to_string(row) +
                            " has " + std::to_string(w[i]));
    amax = std::max(amax, std::fabs(w[i]));
  }
  return amax;
}

void quantize_row(const float* w, int64_t n, int8_t* q, float* scale, int64_t row) {
  const float s = row_amax(w, n, row, "int8") / 127.f;
  *scale = s;
  for (int64_t i = 0; i < n; ++i) {
    const float v = s > 0.f ? std::nearbyint(w[i] / s) : 0.f;
    q[i] = static_cast<int8_t>(std::clamp(v, -127.f, 127.f));
  }
}

// Per-row FP8 E4M3: scale = max|w| / 448, q = e4m3(w / scale) (nearest even, saturating).
void quantize_row_e4m3(const float* w, int64_t n, uint8_t* q, float* scale, int64_t row) {
  const float s = row_amax(w, n, row, "fp8") / kE4m3Max;
  *scale = s;
  for (int64_t i = 0; i < n; ++i) q[i] = s > 0.f ? f32_to_e4m3(w[i] / s) : 0;
}

}  // namespace

// ---- kernel variants ----

namespace detail {

const LinearKernels& linear_kernels(Isa cap) {
  static const IsaVariants<LinearKernels> v{{Isa::kAvx512Bf16, linear_kernels_avx512bf16},
                                            {Isa::kAvx512, linear_kernels_avx512},
                                            {Isa::kAvx2, linear_kernels_avx2},
                                            {Isa::kPortable, linear_kernels_portable}};
  return v.at_most(cap);
}

StreamReadFn stream_read_fn(Isa cap) {
  return linear_kernels(cap).stream_read;
}

}  // namespace detail

const char* linear_isa(Isa cap) {
  return detail::linear_kernels(cap).isa;
}

bool int8_q8_available(Isa cap) {
  return detail::linear_kernels(cap).gemv_i8_q8 != nullptr;
}

// ---- dispatcher ----

namespace {

// Batch invariance takes the matrix-vector kernels for any row count: the GEMM's reduction order
// follows its blocking, which follows the row count.
bool use_gemv(const CpuBackend& be, int64_t n, const PackedLinear& w, const LinearOptions& opt) {
  return opt.path == LinearPath::kGemv ||
         (opt.path == LinearPath::kAuto &&
          (n <= gemv_max_rows(w.format()) || be.batch_invariant()));
}

// The calling thread's buffer for a product the matrix-vector kernels write before it is added
// to y (slot 0 holds their prepared x).
constexpr int kFinishSlot = 3;

// The int8 kernel runs on Q8 blocks of x (Int8Activations::kQ8 where the CPU can).
bool use_q8(const PackedLinear& w, Isa cap, const LinearOptions& opt) {
  return w.format() == WeightFormat::kInt8 && opt.int8_x == Int8Activations::kQ8 &&
         int8_q8_available(cap);
}

void run_gemv(const CpuBackend& be, const float* x, int64_t n, const PackedLinear& w, float* y,
              const LinearOptions& opt) {
  const detail::LinearKernels& ks = detail::linear_kernels(be.isa());
  detail::GemvArgs a;
  a.x = x;
  a.ldx = w.in();
  a.n = n;
  a.k = w.in();
  a.w = w.weight_data();
  a.ldw = w.in();
  a.scale = w.scales();
  a.bias = w.bias();
  a.y = y;
  a.ldy = w.out();
  a.invariant = be.batch_invariant();
  detail::GemvFn fn = ks.gemv_f32;
  if (use_q8(w, be.isa(), opt)) {
    fn = ks.gemv_i8_q8;
    const int64_t row_bytes = detail::q8_row_bytes(w.in());
    void* xq = be.scratch(0, static_cast<size_t>(n * row_bytes));
    ks.prep_x_q8(x, w.in(), n, w.in(), xq, row_bytes);  // n rows of row_bytes
    a.x = static_cast<const float*>(xq);
    a.ldx = row_bytes;
  } else if (w.format() == WeightFormat::kBF16 ||
             (w.format() == WeightFormat::kInt8 && ks.gemv_x_bf16)) {
    fn = w.blocked()                         ? ks.gemv_bf16_blocked
         : w.format() == WeightFormat::kBF16 ? ks.gemv_bf16
                                             : ks.gemv_i8;
    // Blocked weights read x padded as their `in` is (kernels with blocked weights prepare x).
    static_assert(detail::kBf16XBlock == PackedLinear::kBlockedIn);
    if (ks.prep_x_bf16) {
      const int64_t stride =
          (w.in() + detail::kBf16XBlock - 1) / detail::kBf16XBlock * detail::kBf16XBlock;
      auto* xp = static_cast<float*>(be.scratch(0, static_cast<size_t>(n * stride) * 4));
      ks.prep_x_bf16(x, w.in(), n, w.in(), xp, stride);  // [n, stride]
      a.x = xp;
      a.ldx = stride;
      if (w.blocked()) a.ldw = stride;
    }
  } else if (w.format() == WeightFormat::kInt8) {
    fn = ks.gemv_i8;
  }
  // Work items are blocks of 4 output rows (the kernels' widest tile; blocked weights: one block
  // of 64); each chunk should carry at least ~64 KiB of weights so the fork/join cost stays
  // small next to the streaming.
  const int64_t row_block = w.blocked() ? PackedLinear::kBlockedOut : 4;
  // Many small chunks (each still >= 64 KiB of weights): a thread that finishes early takes
  // more from the back of the other's share, where 4 per thread could leave one core idle for up
  // to 1/8 of the layer. Each thread otherwise runs its share front to back: one sequential
  // stream per thread. Chunks handed out in turn made every chunk a new stream that the
  // prefetchers had to pick up again (int8 1536x1536: ~0.70 of the paired bandwidth against
  // 0.86-1.04 now, docs/kernels-gemm.md).
  constexpr int kGemvChunksPerThread = 16;
  const int64_t blocks = (w.out() + row_block - 1) / row_block;
  const int64_t block_bytes =
      row_block * w.in() * static_cast<int64_t>(weight_format_bytes(w.format()));
  const int64_t grain =
      std::max<int64_t>(1, (int64_t{64} << 10) / std::max<int64_t>(1, block_bytes));
  const int64_t out = w.out();
  be.pool().parallel_for_contiguous(
      blocks, grain,
      [&](int64_t b, int64_t e) { fn(a, b * row_block, std::min(out, e * row_block)); },
      kGemvChunksPerThread);
}

}  // namespace

namespace cpu {

PackedLinear pack_linear(const CpuBackend& be, std::span<const Tensor* const> ws,
                         std::span<const Tensor* const> biases, WeightFormat fmt,
                         WeightPlacement place) {
  if (ws.empty()) throw InvalidArgument("PackedLinear: no weights given");
  if (!biases.empty() && biases.size() != ws.size())
    throw InvalidArgument("PackedLinear: " + std::to_string(biases.size()) + " biases for " +
                          std::to_string(ws.size()) + " weights");
  if (fmt != WeightFormat::kF32 && fmt != WeightFormat::kBF16 && fmt != WeightFormat::kInt8 &&
      fmt != WeightFormat::kFp8)
    throw InvalidArgument("PackedLinear: unknown weight format");
  PackedLinear::Parts p;
  p.fmt = fmt;
  std::vector<int64_t> row0;  // first output row of each part
  for (size_t i = 0; i < ws.size(); ++i) {
    if (!ws[i] || !ws[i]->defined())
      throw InvalidArgument("PackedLinear: weight is null/undefined");
    const Tensor& w = *ws[i];
    check_float_tensor(w, "weight");
    if (w.rank() != 2 || w.dim(0) < 1 || w.dim(1) < 1)
      throw InvalidArgument("PackedLinear: weight must be [out, in] with out, in >= 1, got " +
                            w.describe());
    if (i == 0) p.in = w.dim(1);
    if (w.dim(1) != p.in)
      throw InvalidArgument("PackedLinear: concatenated weights differ in `in`: " + w.describe() +
                            " vs in=" + std::to_string(p.in));
    row0.push_back(p.out);
    p.out += w.dim(0);
    if (!biases.empty() && biases[i]) {
      const Tensor& b = *biases[i];
      check_float_tensor(b, "bias");
      if (b.rank() != 1 || b.dim(0) != w.dim(0))
        throw InvalidArgument("PackedLinear: bias must be [" + std::to_string(w.dim(0)) +
                              "], got " + b.describe());
    }
  }
  const int64_t in = p.in, out = p.out;
  p.device = be.device();

  auto same_type = [fmt](const Tensor& w) {
    return (fmt == WeightFormat::kBF16 && w.dtype() == DType::kBF16) ||
           (fmt == WeightFormat::kF32 && w.dtype() == DType::kF32);
  };
  // Zero-copy: one contiguous source already in the stored type.
  const Tensor& w0 = *ws[0];
  if (place == WeightPlacement::kViewIfPossible && ws.size() == 1 && same_type(w0) &&
      w0.is_contiguous()) {
    p.w = w0.raw();
    p.w_owner = w0.owner();
    p.zero_copy = true;
  } else {
    // bf16 weights in the GEMM's blocked layout where this CPU multiplies bf16 pairs (a view of
    // the source stays row-major: it is the source's memory): each row's pairs go down one
    // column of its block, [kp / 2][64] pairs of 32 bits, the padding zero.
    // int8 weights for the GEMM alone (kGemmOnly) likewise, in quads, where the GEMM multiplies
    // int8 on oneDNN: no copy of a weight panel per call (1.1-1.3x its rate on one AMX core).
    constexpr int64_t kB = PackedLinear::kBlockedOut;
    const bool blocked_i8 = fmt == WeightFormat::kInt8 && place == WeightPlacement::kGemmOnly &&
                            detail::linear_kernels(be.isa()).quantize_rows_q8 != nullptr &&
                            detail::onednn_s8_supported() &&
                            detail::onednn_u8s8_blocked_supported() &&
                            in <= 65536;  // 255 x 127 x in within int32
    p.blocked = blocked_i8 || (fmt == WeightFormat::kBF16 &&
                               detail::linear_kernels(be.isa()).gemv_bf16_blocked != nullptr &&
                               detail::onednn_bf16_supported());
    const int64_t kp = PackedLinear::blocked_in(in), np = (out + kB - 1) / kB * kB;
    const int64_t kp8 = PackedLinear::blocked_in_i8(in);
    const size_t esz = weight_format_bytes(fmt);
    std::shared_ptr<void> buf =
        blocked_i8  ? be.allocate(static_cast<size_t>(np * kp8), /*zero=*/true)
        : p.blocked ? be.allocate(static_cast<size_t>(np * kp) * 2, /*zero=*/true)
                    : be.allocate(static_cast<size_t>(out * in) * esz);
    if (fmt == WeightFormat::kInt8 || fmt == WeightFormat::kFp8)
      p.scale = be.allocate(static_cast<size_t>(out) * sizeof(float));
    if (blocked_i8) p.x_offset_sums = be.allocate(static_cast<size_t>(out) * sizeof(int32_t));
    for (size_t i = 0; i < ws.size(); ++i) {
      const Tensor& w = *ws[i];
      const int64_t rows = w.dim(0);
      char* dst0 = static_cast<char*>(buf.get()) + static_cast<size_t>(row0[i] * in) * esz;
      float* scale0 = p.scale ? static_cast<float*>(p.scale.get()) + row0[i] : nullptr;
      const bool copy_rows = same_type(w) && w.strides()[1] == 1;  // rows as stored: memcpy
      be.pool().parallel_for(rows, 64, [&](int64_t b, int64_t e) {
        std::vector<float> tmp(copy_rows ? 0 : static_cast<size_t>(in));  // [in]
        std::vector<uint16_t> row16(p.blocked && !copy_rows ? static_cast<size_t>(in) : 0);
        std::vector<int8_t> row8(blocked_i8 ? static_cast<size_t>(in) : 0);
        for (int64_t r = b; r < e; ++r) {
          if (blocked_i8) {
            row_to_f32(w, r, tmp.data());
            quantize_row(tmp.data(), in, row8.data(), scale0 + r, row0[i] + r);
            int32_t sum = 0;
            for (int64_t c = 0; c < in; ++c) sum += row8[static_cast<size_t>(c)];
            static_cast<int32_t*>(p.x_offset_sums.get())[row0[i] + r] = 128 * sum;
            detail::put_blocked_row<4>(static_cast<int8_t*>(buf.get()), row0[i] + r, row8.data(),
                                       in, kp8);
            continue;
          }
          if (p.blocked) {
            const uint16_t* src = row16.data();
            if (copy_rows) {
              src = static_cast<const uint16_t*>(w.raw()) + r * w.strides()[0];
            } else {
              row_to_f32(w, r, tmp.data());
              f32_to_bf16(tmp.data(), row16.data(), static_cast<size_t>(in));
            }
            detail::put_blocked_row<2>(static_cast<uint16_t*>(buf.get()), row0[i] + r, src, in, kp);
            continue;
          }
          char* dst = dst0 + static_cast<size_t>(r * in) * esz;
          if (copy_rows) {
            std::memcpy(dst, static_cast<const char*>(w.raw()) + r * w.strides()[0] * esz,
                        static_cast<size_t>(in) * esz);
            continue;
          }
          row_to_f32(w, r, tmp.data());
          switch (fmt) {
            case WeightFormat::kF32:
              std::memcpy(dst, tmp.data(), static_cast<size_t>(in) * 4);
              break;
            case WeightFormat::kBF16:
              f32_to_bf16(tmp.data(), reinterpret_cast<uint16_t*>(dst), static_cast<size_t>(in));
              break;
            case WeightFormat::kInt8:
              quantize_row(tmp.data(), in, reinterpret_cast<int8_t*>(dst), scale0 + r, row0[i] + r);
              break;
            case WeightFormat::kFp8:
              quantize_row_e4m3(tmp.data(), in, reinterpret_cast<uint8_t*>(dst), scale0 + r,
                                row0[i] + r);
              break;
          }
        }
      });
    }
    p.w = buf.get();
    p.w_owner = std::move(buf);
  }
  bool any_bias = false;
  for (const Tensor* b : biases) any_bias = any_bias || b != nullptr;
  if (any_bias) {
    p.bias = be.allocate(static_cast<size_t>(out) * sizeof(float), /*zero=*/true);
    for (size_t i = 0; i < biases.size(); ++i) {
      if (!biases[i]) continue;
      Tensor b2 = biases[i]->reshape({1, biases[i]->dim(0)});
      if (!biases[i]->is_contiguous()) b2 = biases[i]->contiguous().reshape({1, biases[i]->dim(0)});
      row_to_f32(b2, 0, static_cast<float*>(p.bias.get()) + row0[i]);
    }
  }
  return PackedLinear(std::move(p));
}

// The CPU packs FP8 weights for a GPU but multiplies none.
static void refuse_fp8(const PackedLinear& w) {
  if (w.format() == WeightFormat::kFp8)
    throw Unimplemented(
        "linear: fp8 weights compute on CUDA devices (Hopper's FP8); the CPU has int8 and bf16");
}

void linear(const CpuBackend& be, const float* x, int64_t n, const PackedLinear& w, float* y,
            const LinearOptions& opt) {
  // The dispatcher (kernels/linear.cpp) checked the sizes, pointers and device.
  refuse_fp8(w);
  if (w.blocked() && w.format() == WeightFormat::kBF16 &&
      !detail::linear_kernels(be.isa()).gemv_bf16_blocked)
    throw InvalidArgument(std::string("linear: these bf16 weights were packed blocked for "
                                      "AVX512-BF16 kernels; this backend runs the ") +
                          linear_isa(be.isa()) + " ones: pack them on this backend");
  const bool gemv = use_gemv(be, n, w, opt);
  if (w.blocked() && w.format() == WeightFormat::kInt8 &&
      (gemv || !detail::gemm_choice(w, be.isa(), opt).s8))
    throw InvalidArgument(
        "linear: these int8 weights were packed for the int8 GEMM alone "
        "(WeightPlacement::kGemmOnly): multiply them with LinearPath::kGemm and Int8Gemm::kQ8Row "
        "on a backend with the int8 GEMM");
  if (!gemv) {
    detail::run_gemm(x, n, w, y, be, opt);  // act and accumulate in its epilogue
    return;
  }
  if (opt.act == LinearAct::kNone && !opt.accumulate) {
    run_gemv(be, x, n, w, y, opt);
    return;
  }
  // The matrix-vector kernels write plain rows (a few, or batch-invariant prefill): the
  // activation and the add after them, with the element-wise ops' kernels.
  const int64_t out = w.out();
  float* t = opt.accumulate
                 ? static_cast<float*>(be.scratch(kFinishSlot, static_cast<size_t>(n * out) * 4))
                 : y;
  run_gemv(be, x, n, w, t, opt);
  const detail::Finish fin = detail::finish_for(be.isa(), opt);
  be.pool().parallel_for(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) detail::finish_row(fin, y + r * out, t + r * out, out);
  });
}

LinearPlan linear_plan(const CpuBackend& be, int64_t n, const PackedLinear& w,
                       const LinearOptions& opt) {
  refuse_fp8(w);
  LinearPlan p;
  if (use_gemv(be, n, w, opt)) {
    p.gemv = true;
    p.kernel = std::string(linear_isa(be.isa())) + " gemv";
    if (use_q8(w, be.isa(), opt)) {
      p.kernel += " (x q8, vnni)";
      p.x_quantised_q8 = true;
      return p;
    }
    p.x_rounded_to_bf16 =
        w.format() != WeightFormat::kF32 && detail::linear_kernels(be.isa()).gemv_x_bf16;
    return p;
  }
  const detail::GemmChoice c = detail::gemm_choice(w, be.isa(), opt);
  p.gemv = false;
  p.kernel = c.name;
  p.x_rounded_to_bf16 = c.bf16;
  p.x_quantised_q8_row = c.s8;
  return p;
}

}  // namespace cpu

}  // namespace mmrt::kernels
