// Prefill GEMM for linear(): threads single-threaded library calls on our ThreadPool.
//
// Work is split over panels of output channels (P rows of W, all n rows of x): each pool task
// multiplies x by one panel into a private [n, P] tile, then writes y's columns with the
// per-channel scale and bias (the epilogue). Weights are read once overall; x is shared.
//   bf16 weights, AVX512-BF16: x rounded to bf16 once, oneDNN bf16 x bf16 -> f32 (brgemm).
//   int8 weights, AVX512-BF16: each panel widened to bf16 first (exact: |q| <= 127).
//   int8 weights, Int8Gemm::kQ8Row on AVX512-VNNI: x quantised per row once, oneDNN s8 x s8 ->
//     s32 on the stored weights (no widening), the scales applied in the epilogue. Blocked int8
//     weights: x as u8 = q + 128, u8 x s8 -> s32, minus PackedLinear::x_offset_sums (the same
//     int32 sums; oneDNN multiplies s8 x s8 on its blocked layout natively only on AMX).
//   f32 weights, or bf16/int8 without AVX512-BF16: f32 GEMM (oneDNN or OpenBLAS) with x exact,
//     bf16/int8 panels widened to f32 first.
// oneDNN primitives are cached per shape, so rows are padded to a multiple of 16 and run in
// tiles of at most 512: a new prompt length costs at most one primitive per padded size.
#include <algorithm>
#include <cstring>

#include "core/convert.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/linear_impl.h"
#include "kernels/cpu/ops_impl.h"

namespace mmrt::kernels::detail {

Finish finish_for(Isa cap, const LinearOptions& opt) {
  Finish fin;
  fin.act = opt.act == LinearAct::kQuickGelu ? 1 : opt.act == LinearAct::kGeluErf ? 2 : 0;
  fin.accumulate = opt.accumulate;
  fin.ops = &ops_fns(cap);
  return fin;
}

void finish_row(const Finish& fin, float* yr, const float* dst, int64_t cols) {
  fin.ops->gemm_row_f32(dst, nullptr, nullptr, fin.act, fin.accumulate, yr, cols);
}

namespace {

constexpr int64_t kRowPad = 16;        // oneDNN row count granularity
constexpr int64_t kMaxTileRows = 512;  // rows of x per oneDNN call
constexpr int64_t kPanel = 256;        // output channels per task (upper bound) ...
constexpr int64_t kWidePanel = 512;    // ... where x's rows are long (k >= kLongRow)
constexpr int64_t kLongRow = 4096;
constexpr size_t kPanelBytes = size_t{2} << 20;  // widened panel budget (per thread)

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// Scratch slots: 0 = prepared x (calling thread), 1 = widened panel, 2 = output tile.
enum Slot { kSlotX = 0, kSlotPanel = 1, kSlotTile = 2 };

// Widens rows [r0, r0 + rows) of the stored weights into the GEMM's element type.
void widen_panel(const LinearKernels& ks, const PackedLinear& w, int64_t r0, int64_t rows,
                 bool to_bf16, void* dst) {
  const int64_t k = w.in();
  const size_t cnt = static_cast<size_t>(rows * k);
  if (w.format() == WeightFormat::kBF16) {  // -> f32
    bf16_to_f32(static_cast<const uint16_t*>(w.weight_data()) + r0 * k, static_cast<float*>(dst),
                cnt);
    return;
  }
  const int8_t* q = static_cast<const int8_t*>(w.weight_data()) + r0 * k;
  if (to_bf16)
    ks.i8_to_bf16(q, static_cast<uint16_t*>(dst), cnt);  // exact: |q| <= 127
  else
    ks.i8_to_f32(q, static_cast<float*>(dst), cnt);
}

// y[r, c] = t[r, c] * scale[c] + bias[c] for a [rows, cols] tile (t may alias y unless
// fin.accumulate), then `fin`: one pass per row (OpsFns::gemm_row_f32).
void epilogue(const float* t, int64_t ldt, int64_t rows, int64_t cols, const float* scale,
              const float* bias, float* y, int64_t ldy, const Finish& fin) {
  for (int64_t r = 0; r < rows; ++r)
    fin.ops->gemm_row_f32(t + r * ldt, scale, bias, fin.act, fin.accumulate, y + r * ldy, cols);
}

// y[r, c] = f32(t[r, c] - off[c]) * sx[r] * sw[c] + bias[c] for a [rows, cols] int32 tile
// (off null: none), then `fin`: one pass per row (OpsFns::gemm_row_i32).
void epilogue_s8(const int32_t* t, int64_t ldt, int64_t rows, int64_t cols, const int32_t* off,
                 const float* sx, const float* sw, const float* bias, float* y, int64_t ldy,
                 const Finish& fin) {
  for (int64_t r = 0; r < rows; ++r)
    fin.ops->gemm_row_i32(t + r * ldt, off, sx[r], sw, bias, fin.act, fin.accumulate, y + r * ldy,
                          cols);
}

}  // namespace

GemmChoice gemm_choice(const PackedLinear& w, Isa cap, const LinearOptions& opt) {
  if (w.format() == WeightFormat::kInt8 && opt.int8_gemm == Int8Gemm::kQ8Row &&
      linear_kernels(cap).quantize_rows_q8 && onednn_s8_supported())
    return {"onednn s8 (x q8 per row, vnni)", false, false, true};
  if (w.format() != WeightFormat::kF32 && linear_kernels(cap).native_bf16_gemm &&
      onednn_bf16_supported())
    return {"onednn bf16", true, false};
  // oneDNN's f32 brgemm measured ~2x OpenBLAS 0.3.21 here (docs/kernels-gemm.md).
  if (opt.f32_gemm == GemmLibrary::kOpenBlas) return {"openblas f32", false, true};
  return {"onednn f32", false, false};
}

void run_gemm(const float* x, int64_t m, const PackedLinear& w, float* y, const CpuBackend& be,
              const LinearOptions& opt) {
  ThreadPool& pool = be.pool();
  const LinearKernels& ks = linear_kernels(be.isa());
  const GemmChoice c = gemm_choice(w, be.isa(), opt);
  const int64_t k = w.in(), n = w.out();
  const bool widen = !c.s8 && (w.format() == WeightFormat::kInt8 ||
                               (w.format() == WeightFormat::kBF16 && !c.bf16));
  const size_t gemm_esz = c.s8 ? 1 : c.bf16 ? 2 : 4;
  const Finish fin = finish_for(be.isa(), opt);

  // The x operand: [mp, k] in the GEMM's type; rows past m are zero.
  const int64_t mp = c.openblas ? m : round_up(m, kRowPad);
  const void* a = x;
  const float* x_scale = nullptr;  // [mp], s8 only
  // Blocked int8 weights multiply x as u8 = q + 128 (the flipped sign bit; padding rows q = 0).
  const bool u8 = c.s8 && w.blocked();
  if (u8 && !w.x_offset_sums()) throw InternalError("blocked int8 weights without offset sums");
  if (c.s8) {
    const size_t qbytes = static_cast<size_t>(round_up(mp * k, 64));
    auto* buf = static_cast<char*>(be.scratch(kSlotX, qbytes + static_cast<size_t>(mp) * 4));
    auto* q = reinterpret_cast<int8_t*>(buf);
    auto* sc = reinterpret_cast<float*>(buf + qbytes);
    pool.parallel_for(mp, std::max<int64_t>(1, 16384 / k), [&](int64_t b, int64_t e) {
      const int64_t real = std::clamp<int64_t>(m - b, 0, e - b);
      if (real > 0) ks.quantize_rows_q8(x + b * k, k, real, k, q + b * k, k, sc + b, u8);
      for (int64_t r = b + real; r < e; ++r) {
        std::memset(q + r * k, u8 ? 0x80 : 0, static_cast<size_t>(k));
        sc[r] = 0;
      }
    });
    a = q;
    x_scale = sc;
  } else if (c.bf16 || mp != m) {
    void* buf = be.scratch(kSlotX, static_cast<size_t>(mp * k) * gemm_esz);
    pool.parallel_for(mp, std::max<int64_t>(1, 16384 / k), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        if (c.bf16) {
          auto* d = static_cast<uint16_t*>(buf) + r * k;
          if (r < m)
            f32_to_bf16(x + r * k, d, static_cast<size_t>(k));
          else
            std::memset(d, 0, static_cast<size_t>(k) * 2);
        } else {
          auto* d = static_cast<float*>(buf) + r * k;
          if (r < m)
            std::memcpy(d, x + r * k, static_cast<size_t>(k) * 4);
          else
            std::memset(d, 0, static_cast<size_t>(k) * 4);
        }
      }
    });
    a = buf;
  }

  // Panels: at most kPanel channels each (kWidePanel for long rows; and the widening budget), in
  // units of 16 channels (whole blocks of a blocked layout, whose blocks are contiguous), as
  // equal as the units allow, and as many as a multiple of the pool's threads, at least two
  // each: with panels of a fixed width, the vision towers' 1,280 channels made five panels of 256
  // on two threads, and one thread idled through the fifth (a sixth of the GEMM's time).
  constexpr int64_t kB = PackedLinear::kBlockedOut;
  const bool i8 = w.format() == WeightFormat::kInt8;
  if (w.blocked() && (i8 ? !c.s8 : !c.bf16))
    throw InternalError("blocked weights on a GEMM that does not multiply their type");
  // Long rows of x (a tile of them far past L2) take wider panels, so fewer passes over x: the
  // vision towers' fc2 (k = 5,120, 1,024 rows) in 4 panels of 320 channels ran 10-13 % faster
  // than in 6 of ~213, in bf16 and int8 alike; at k = 1,280-1,536, 512 was 5-10 % slower than
  // 256 (docs/kernels-gemm.md).
  int64_t cap = k >= kLongRow ? kWidePanel : kPanel;
  if (widen)
    cap = std::min<int64_t>(
        cap, static_cast<int64_t>(kPanelBytes / (static_cast<size_t>(k) * gemm_esz)));
  const int64_t unit = w.blocked() ? kB : 16;
  const int64_t units = (n + unit - 1) / unit;
  const int64_t threads = pool.size();
  const int64_t cap_units = std::max<int64_t>(1, cap / unit);
  const int64_t n_panels = std::min(
      units, round_up(std::max((units + cap_units - 1) / cap_units, 2 * threads), threads));
  // Panel p: units [p * units / n_panels, (p + 1) * units / n_panels).
  auto panel_start = [&](int64_t p) { return std::min(n, p * units / n_panels * unit); };
  // Elements per output channel as stored (`in`, padded in a blocked layout): a panel starts
  // c0 channels of them in (whole blocks of a blocked layout are contiguous).
  const int64_t stored_in = !w.blocked() ? k
                            : i8         ? PackedLinear::blocked_in_i8(k)
                                         : PackedLinear::blocked_in(k);
  const auto* stored = static_cast<const char*>(w.weight_data());
  const size_t stored_esz = w.format() == WeightFormat::kF32    ? 4
                            : w.format() == WeightFormat::kBF16 ? 2
                                                                : 1;

  pool.parallel_for(n_panels, 1, [&](int64_t pb, int64_t pe) {
    gemm_libraries_single_threaded();
    for (int64_t p = pb; p < pe; ++p) {
      const int64_t c0 = panel_start(p), cols = panel_start(p + 1) - c0;
      const void* wp = stored + static_cast<size_t>(c0 * stored_in) * stored_esz;
      if (widen) {
        void* buf = be.scratch(kSlotPanel, static_cast<size_t>(cols * k) * gemm_esz);
        widen_panel(ks, w, c0, cols, c.bf16, buf);
        wp = buf;
      }
      const float* scale = w.scales() ? w.scales() + c0 : nullptr;
      const float* bias = w.bias() ? w.bias() + c0 : nullptr;
      if (c.openblas) {  // writes y's columns directly (a tile to add to them: accumulate),
                         // then scales and biases them in place
        float* t = y + c0;
        int64_t ldt = n;
        if (fin.accumulate) {
          t = static_cast<float*>(be.scratch(kSlotTile, static_cast<size_t>(m * cols) * 4));
          ldt = cols;
        }
        openblas_sgemm(static_cast<const float*>(a), m, k, static_cast<const float*>(wp), cols, k,
                       t, ldt);
        epilogue(t, ldt, m, cols, scale, bias, y + c0, n, fin);
        continue;
      }
      for (int64_t r0 = 0; r0 < mp; r0 += kMaxTileRows) {
        const int64_t rows = std::min(kMaxTileRows, mp - r0);
        void* t = be.scratch(kSlotTile, static_cast<size_t>(rows * cols) * 4);
        const GemmType type = u8       ? GemmType::kU8S8
                              : c.s8   ? GemmType::kS8
                              : c.bf16 ? GemmType::kBF16
                                       : GemmType::kF32;
        onednn_matmul(be, type,
                      static_cast<const char*>(a) + static_cast<size_t>(r0 * k) * gemm_esz, rows, k,
                      wp, cols, k, t, cols,
                      w.blocked() ? WeightLayout::kBlocked : WeightLayout::kNK);  // t: [rows, cols]
        if (c.s8)
          epilogue_s8(static_cast<const int32_t*>(t), cols, std::min(rows, m - r0), cols,
                      u8 ? w.x_offset_sums() + c0 : nullptr, x_scale + r0, scale, bias,
                      y + r0 * n + c0, n, fin);
        else
          epilogue(static_cast<const float*>(t), cols, std::min(rows, m - r0), cols, scale, bias,
                   y + r0 * n + c0, n, fin);
      }
    }
  });
}

}  // namespace mmrt::kernels::detail
