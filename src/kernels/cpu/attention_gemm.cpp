// Encoder attention as GEMMs (VarlenAttentionArgs::bf16, full masks): per (segment, head, tile of
// kTileQ query rows), S = bf16(q * scale) . bf16(K)^T and O = bf16(P) . bf16(V) run on oneDNN's
// bf16 matmul (AVX512-BF16 dot products or AMX tiles, f32 sums), with the row softmax between
// them on the whole segment at once (no online rescaling: a ViT segment is at most a few thousand
// keys, S a few hundred KiB).
//
// K and V are packed once per (segment, head) in the library's blocked layout (BA16a64b2a, as
// the bf16 linear weights are: PackedLinear::blocked_offset), so no matmul call copies them, and
// the head dimension of q and K is padded with zeros to a multiple of 32 (80 -> 96): oneDNN's
// AMX kernel handles a reduction length that is not a multiple of 32 in a slow tail path.
// Measured on one AMX core, 128 queries x 1024 keys x 80 dims: S 82 -> 31 us, O 25 -> 17 us.
//
// Int8 scores (VarlenAttentionArgs::int8_scores, the int8 encoder blocks; AVX512-VNNI): S from
// u8 query rows and int8 keys (attention_int8_avx512vnni.cpp), exact integer sums, instead of
// the first matmul; the softmax and O as above. VNNI's int8 rate is twice its bf16 one and the
// head dimension needs no padding past a multiple of 4.
//
// Keys are padded to a multiple of kPadK (zero K and V rows, masked out of the softmax),
// query tiles to kTileQ rows, so a oneDNN primitive serves every segment of the same padded length.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/convert.h"
#include "core/cpu.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/linear_impl.h"
#include "kernels/linear.h"

namespace mmrt::kernels::detail {

namespace {

constexpr int64_t kTileQ = 128;  // query rows per work item (64: 14 % slower on AMX, 1024 keys)
constexpr int64_t kPadK = 64;    // keys padded to a multiple of this

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// Every segment's mean key [n_seqs, heads * hd] for the int8 scores (summed in double over the
// segment's keys, per column).
std::vector<float> key_means(const CpuBackend& be, const VarlenAttentionArgs& a) {
  const int64_t E = int64_t(a.n_heads) * a.head_dim;
  const size_t n_seqs = a.cu_seqlens.size() - 1;
  std::vector<float> mean(n_seqs * static_cast<size_t>(E));
  constexpr int64_t kCols = 64;
  const int64_t col_blocks = (E + kCols - 1) / kCols;
  be.pool().parallel_for(static_cast<int64_t>(n_seqs) * col_blocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      const size_t s = static_cast<size_t>(it / col_blocks);
      const int64_t c0 = (it % col_blocks) * kCols, nc = std::min(kCols, E - c0);
      const int64_t row0 = a.cu_seqlens[s], len = a.cu_seqlens[s + 1] - row0;
      double acc[kCols] = {};
      for (int64_t t = 0; t < len; ++t) {
        const float* kr = a.k + (row0 + t) * a.k_stride + c0;
        for (int64_t c = 0; c < nc; ++c) acc[c] += kr[c];
      }
      float* m = mean.data() + s * static_cast<size_t>(E) + c0;
      for (int64_t c = 0; c < nc; ++c) m[c] = len > 0 ? static_cast<float>(acc[c] / len) : 0.0f;
    }
  });
  return mean;
}

}  // namespace

bool varlen_int8_scores_here(const CpuBackend& be) {
  // The backend's variant is never above what the CPU has: kAvx512Bf16 means AVX512-BF16.
  // Not on AMX: its bf16 tiles compute S faster than VNNI's int8 dot products.
  return be.isa() == Isa::kAvx512Bf16 && onednn_bf16_supported() && cpu_features().avx512vnni &&
         !onednn_amx();
}

bool varlen_attention_gemm(const CpuBackend& be, const VarlenAttentionArgs& a) {
  // Strides and scale as the dispatcher resolved them.
  const int64_t q_stride = a.q_stride, k_stride = a.k_stride, v_stride = a.v_stride;
  const int64_t out_stride = a.out_stride;
  const float scale = a.scale;
  const bool int8 = a.int8_scores;
  // The dispatcher has checked int8 scores' conditions (varlen_int8_scores_supported, masks,
  // heads): they imply the ones below.
  // Even head dims only (every model's, and what the tests cover); an odd one takes the exact
  // kernel.
  if ((!a.bf16 && !int8) || a.mask != MaskKind::kFull || a.n_heads != a.n_kv_heads ||
      a.head_dim % 2 != 0 || be.isa() != Isa::kAvx512Bf16 || !onednn_bf16_supported())
    return false;
  const int64_t hd = a.head_dim, H = a.n_heads;
  // K as the [hdp, lenp] operand of S (hd padded to the blocked layout's pairs of 16), V as the
  // [lenp, hd] operand of O (its columns padded to the layout's blocks of 64).
  const int64_t hdp = PackedLinear::blocked_in(hd);
  const int64_t hdn = round_up(hd, PackedLinear::kBlockedOut);
  const size_t n_seqs = a.cu_seqlens.size() - 1;
  std::vector<int64_t> off(n_seqs + 1, 0);  // elements of one head's K (or V) block, summed
  for (size_t i = 0; i < n_seqs; ++i)
    off[i + 1] = off[i] + round_up(a.cu_seqlens[i + 1] - a.cu_seqlens[i], kPadK) * H;
  // Scratch: V (bf16, blocked), then K: bf16 blocked, or for int8 scores the keys' scales,
  // offsets and int8 quads (Int8Keys), then the queries' scales and u8 rows (Int8Queries).
  const int64_t keys = off[n_seqs], n_rows = a.cu_seqlens[n_seqs];
  const size_t k_bytes = int8 ? static_cast<size_t>(keys * (8 + hd) + H * n_rows * (4 + hd))
                              : static_cast<size_t>(keys * hdp) * sizeof(uint16_t);
  auto* pack = static_cast<uint16_t*>(
      be.scratch(kPackedKSlot, static_cast<size_t>(keys * hdn) * sizeof(uint16_t) + k_bytes));
  uint16_t* const vpack = pack;
  uint16_t* const kpack = pack + keys * hdn;
  std::vector<Int8Keys> k8(int8 ? n_seqs * static_cast<size_t>(H) : 0);
  std::vector<Int8Queries> q8(int8 ? static_cast<size_t>(H) : 0);
  std::vector<float> mean;
  if (int8) {
    auto* kscale = reinterpret_cast<float*>(kpack);
    auto* koffset = reinterpret_cast<int32_t*>(kscale + keys);
    auto* qscale = reinterpret_cast<float*>(koffset + keys);
    auto* kq = reinterpret_cast<int8_t*>(qscale + H * n_rows);
    auto* qq = reinterpret_cast<uint8_t*>(kq + keys * hd);
    for (size_t i = 0; i < n_seqs; ++i) {
      const int64_t lenp = round_up(a.cu_seqlens[i + 1] - a.cu_seqlens[i], kPadK);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t o = off[i] + h * lenp;
        k8[i * static_cast<size_t>(H) + static_cast<size_t>(h)] =
            Int8Keys{kq + o * hd, kscale + o, koffset + o, lenp};
      }
    }
    for (int64_t h = 0; h < H; ++h)
      q8[static_cast<size_t>(h)] = Int8Queries{qq + h * n_rows * hd, qscale + h * n_rows};
    mean = key_means(be, a);
  }
  // Packing walks pairs of keys (padded to lenp per segment), so every key's K and V rows are
  // read once, whole (all heads, contiguous), and scattered into each head's blocks.
  std::vector<int64_t> first_pair(n_seqs + 1, 0);
  for (size_t i = 0; i < n_seqs; ++i)
    first_pair[i + 1] = first_pair[i] + round_up(a.cu_seqlens[i + 1] - a.cu_seqlens[i], kPadK) / 2;
  const int64_t E = H * hd;
  ThreadPool& tp = be.pool();
  tp.parallel_for(first_pair[n_seqs], 16, [&](int64_t b, int64_t e) {
    std::vector<uint16_t> rows(static_cast<size_t>(4 * E));  // K of keys t, t + 1, then V
    for (int64_t pi = b; pi < e; ++pi) {
      const size_t s = static_cast<size_t>(
          std::upper_bound(first_pair.begin(), first_pair.end(), pi) - first_pair.begin() - 1);
      const int64_t row0 = a.cu_seqlens[s], len = a.cu_seqlens[s + 1] - row0;
      const int64_t lenp = round_up(len, kPadK), t = 2 * (pi - first_pair[s]);
      for (int64_t j = 0; j < 2; ++j) {
        uint16_t* kr = rows.data() + j * E;
        uint16_t* vr = rows.data() + (2 + j) * E;
        if (t + j < len) {
          const int64_t row = row0 + t + j;
          if (int8) {  // this row's query and key, every head
            pack_key_int8(a.k + row * k_stride, mean.data() + s * static_cast<size_t>(E),
                          static_cast<int>(H), static_cast<int>(hd), t + j,
                          k8.data() + s * static_cast<size_t>(H));
            pack_query_int8(a.q + row * q_stride, static_cast<int>(H), static_cast<int>(hd), row,
                            scale, q8.data());
          } else {
            f32_to_bf16(a.k + row * k_stride, kr, static_cast<size_t>(E));
          }
          f32_to_bf16(a.v + row * v_stride, vr, static_cast<size_t>(E));
        } else {  // padding keys: zero
          std::memset(kr, 0, static_cast<size_t>(E) * 2);
          std::memset(vr, 0, static_cast<size_t>(E) * 2);
          for (int64_t h = 0; int8 && h < H; ++h) {
            const Int8Keys& k = k8[s * static_cast<size_t>(H) + static_cast<size_t>(h)];
            const int64_t key = t + j;
            k.scale[key] = 0.0f;
            k.offset[key] = 0;
            for (int64_t g = 0; g < hd / 4; ++g)
              std::memset(k.q + (key / 16) * 16 * hd + g * 64 + (key % 16) * 4, 0, 4);
          }
        }
      }
      for (int64_t h = 0; h < H; ++h) {
        uint16_t* vd = vpack + off[s] * hdn + h * lenp * hdn;  // blocked [lenp, hdn]
        if (!int8) {
          uint16_t* kd = kpack + off[s] * hdp + h * lenp * hdp;  // blocked [hdp, lenp]
          for (int64_t j = 0; j < 2; ++j)  // K: each key is an output channel of S
            put_blocked_row<2>(kd, t + j, rows.data() + j * E + h * hd, hd, hdp);
        }
        // V: one dim of both keys side by side, 64 dims in a row of the block
        const uint16_t* v0 = rows.data() + 2 * E + h * hd;
        const uint16_t* v1 = v0 + E;
        for (int64_t d0 = 0; d0 < hdn; d0 += PackedLinear::kBlockedOut) {
          uint16_t* dst = vd + PackedLinear::blocked_offset(d0, t, lenp);
          const int64_t n = std::clamp<int64_t>(hd - d0, 0, PackedLinear::kBlockedOut);
          for (int64_t d = 0; d < n; ++d) {
            dst[2 * d] = v0[d0 + d];
            dst[2 * d + 1] = v1[d0 + d];
          }
          std::memset(dst + 2 * n, 0, static_cast<size_t>(PackedLinear::kBlockedOut - n) * 4);
        }
      }
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
      // Item buffers: q bf16 [kTileQ, hdp] (int8 scores: unused, q was packed with K), S f32
      // [kTileQ, lenp], P bf16 [kTileQ, lenp], O f32 [kTileQ, hd], sums [kTileQ].
      const size_t bytes =
          static_cast<size_t>(kTileQ * hdp * 2 + kTileQ * lenp * 6 + kTileQ * hd * 4 + kTileQ * 4);
      auto* buf = static_cast<char*>(be.scratch(kItemScratchSlot, bytes));
      auto* qb = reinterpret_cast<uint16_t*>(buf);
      auto* sc = reinterpret_cast<float*>(qb + kTileQ * hdp);
      auto* pb = reinterpret_cast<uint16_t*>(sc + kTileQ * lenp);
      auto* ob = reinterpret_cast<float*>(pb + kTileQ * lenp);
      float* sums = ob + kTileQ * hd;
      if (int8) {  // S from the u8 query rows and the int8 keys
        const Int8Queries& qh = q8[static_cast<size_t>(h)];
        scores_int8(qh.q + (row0 + q0) * hd, qh.scale + row0 + q0, static_cast<int>(rows),
                    static_cast<int>(hd), k8[s * static_cast<size_t>(H) + static_cast<size_t>(h)],
                    sc);
      } else {
        const float* qrow = a.q + (row0 + q0) * q_stride + h * hd;
        scale_rows_bf16(qrow, q_stride, static_cast<int>(rows), static_cast<int>(kTileQ),
                        static_cast<int>(hd), static_cast<int>(hdp), scale, qb);
        const uint16_t* kd = kpack + off[s] * hdp + h * lenp * hdp;
        onednn_matmul(be, GemmType::kBF16, qb, kTileQ, hdp, kd, lenp, 0, sc, lenp,
                      WeightLayout::kBlocked);  // S
      }
      const uint16_t* vd = vpack + off[s] * hdn + h * lenp * hdn;
      softmax_rows_bf16(sc, static_cast<int>(rows), static_cast<int>(len), static_cast<int>(lenp),
                        pb, sums);
      if (rows < kTileQ)  // rows past the segment: zero probabilities, not stale ones
        std::memset(pb + rows * lenp, 0, static_cast<size_t>((kTileQ - rows) * lenp) * 2);
      onednn_matmul(be, GemmType::kBF16, pb, kTileQ, lenp, vd, hd, 0, ob, hd,
                    WeightLayout::kBlocked);  // O
      normalize_rows(ob, sums, static_cast<int>(rows), static_cast<int>(hd),
                     a.out + (row0 + q0) * out_stride + h * hd, out_stride);
    }
  });
  return true;
}

}  // namespace mmrt::kernels::detail
