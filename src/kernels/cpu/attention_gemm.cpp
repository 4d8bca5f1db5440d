// Encoder attention as GEMMs (VarlenAttentionArgs::bf16, full masks): per (segment, head, tile of
// kTileQ query rows), S = bf16(q * scale) . bf16(K)^T and O = bf16(P) . bf16(V) run on oneDNN's
// bf16 matmul (AVX512-BF16 dot products, f32 sums), with the row softmax between them on the
// whole segment at once (no online rescaling: a ViT segment is at most a few thousand keys, S a
// few hundred KiB). The f32 kernel (attention_kernel.h) reaches ~310 GFLOP/s on 2 threads on a
// 1024-patch image; this one ~2x that (bench_ops VisionAttention).
//
// Keys are padded to a multiple of kPadK (zero K and V rows, masked out of the softmax),
// query tiles to kTileQ rows, so a oneDNN primitive serves every segment of the same padded length.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/convert.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/linear_impl.h"

namespace mmrt::kernels::detail {

namespace {

constexpr int64_t kTileQ = 128;  // query rows per work item (64: 14 % slower on AMX, 1024 keys)
constexpr int64_t kPadK = 64;    // keys padded to a multiple of this

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

}  // namespace

bool varlen_attention_gemm(const CpuBackend& be, const VarlenAttentionArgs& a, int64_t q_stride,
                           int64_t k_stride, int64_t v_stride, int64_t out_stride, float scale) {
  // The backend's variant is never above what the CPU has: kAvx512Bf16 means AVX512-BF16.
  if (!a.bf16 || a.mask != MaskKind::kFull || a.n_heads != a.n_kv_heads ||
      be.isa() != Isa::kAvx512Bf16 || !onednn_bf16_supported())
    return false;
  const int64_t hd = a.head_dim, H = a.n_heads;
  const size_t n_seqs = a.cu_seqlens.size() - 1;
  // Packed per (segment, head): K and V bf16 [lenp, hd], zero padded.
  std::vector<int64_t> off(n_seqs + 1, 0);
  for (size_t i = 0; i < n_seqs; ++i)
    off[i + 1] = off[i] + round_up(a.cu_seqlens[i + 1] - a.cu_seqlens[i], kPadK) * hd * H;
  auto* pack = static_cast<uint16_t*>(
      be.scratch(kPackedKSlot, static_cast<size_t>(2 * off[n_seqs]) * sizeof(uint16_t)));
  uint16_t* const kpack = pack;
  uint16_t* const vpack = pack + off[n_seqs];
  ThreadPool& tp = be.pool();
  tp.parallel_for(static_cast<int64_t>(n_seqs) * H, 1, [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      const size_t s = static_cast<size_t>(w / H);
      const int64_t h = w % H, row0 = a.cu_seqlens[s], len = a.cu_seqlens[s + 1] - row0;
      const int64_t lenp = round_up(len, kPadK);
      uint16_t* kd = kpack + off[s] + h * lenp * hd;  // [lenp, hd]
      uint16_t* vd = vpack + off[s] + h * lenp * hd;  // [lenp, hd]
      for (int64_t t = 0; t < len; ++t) {
        f32_to_bf16(a.k + (row0 + t) * k_stride + h * hd, kd + t * hd, static_cast<size_t>(hd));
        f32_to_bf16(a.v + (row0 + t) * v_stride + h * hd, vd + t * hd, static_cast<size_t>(hd));
      }
      std::memset(kd + len * hd, 0, static_cast<size_t>((lenp - len) * hd) * 2);
      std::memset(vd + len * hd, 0, static_cast<size_t>((lenp - len) * hd) * 2);
    }
  });
  // Work items: (segment, head, query tile).
  std::vector<int64_t> first_item(n_seqs + 1, 0);
  for (size_t i = 0; i < n_seqs; ++i)
    first_item[i + 1] =
        first_item[i] + H * ((a.cu_seqlens[i + 1] - a.cu_seqlens[i] + kTileQ - 1) / kTileQ);
  tp.parallel_for(first_item[n_seqs], 1, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      const size_t s = static_cast<size_t>(
          std::upper_bound(first_item.begin(), first_item.end(), it) - first_item.begin() - 1);
      const int64_t row0 = a.cu_seqlens[s], len = a.cu_seqlens[s + 1] - row0;
      const int64_t lenp = round_up(len, kPadK), tiles = (len + kTileQ - 1) / kTileQ;
      const int64_t local = it - first_item[s], h = local / tiles, q0 = (local % tiles) * kTileQ;
      const int64_t rows = std::min(kTileQ, len - q0);
      // Item buffers: q bf16 [kTileQ, hd], S f32 [kTileQ, lenp], P bf16 [kTileQ, lenp],
      // O f32 [kTileQ, hd], sums [kTileQ].
      const size_t bytes =
          static_cast<size_t>(kTileQ * hd * 2 + kTileQ * lenp * 6 + kTileQ * hd * 4 + kTileQ * 4);
      auto* buf = static_cast<char*>(be.scratch(kItemScratchSlot, bytes));
      auto* qb = reinterpret_cast<uint16_t*>(buf);
      auto* sc = reinterpret_cast<float*>(qb + kTileQ * hd);
      auto* pb = reinterpret_cast<uint16_t*>(sc + kTileQ * lenp);
      auto* ob = reinterpret_cast<float*>(pb + kTileQ * lenp);
      float* sums = ob + kTileQ * hd;
      scale_rows_bf16(a.q + (row0 + q0) * q_stride + h * hd, q_stride, static_cast<int>(rows),
                      static_cast<int>(kTileQ), static_cast<int>(hd), scale, qb);
      const uint16_t* kd = kpack + off[s] + h * lenp * hd;
      const uint16_t* vd = vpack + off[s] + h * lenp * hd;
      onednn_matmul(be, GemmType::kBF16, qb, kTileQ, hd, kd, lenp, hd, sc, lenp);  // S
      softmax_rows_bf16(sc, static_cast<int>(rows), static_cast<int>(len), static_cast<int>(lenp),
                        pb, sums);
      if (rows < kTileQ)  // rows past the segment: zero probabilities, not stale ones
        std::memset(pb + rows * lenp, 0, static_cast<size_t>((kTileQ - rows) * lenp) * 2);
      onednn_matmul(be, GemmType::kBF16, pb, kTileQ, lenp, vd, hd, hd, ob, hd,
                    WeightLayout::kKN);  // O
      normalize_rows(ob, sums, static_cast<int>(rows), static_cast<int>(hd),
                     a.out + (row0 + q0) * out_stride + h * hd, out_stride);
    }
  });
  return true;
}

}  // namespace mmrt::kernels::detail
