// The encoders' attention on tensor cores: varlen attention with a kFull mask where the caller
// allows bf16 products (VarlenAttentionArgs::bf16: q scaled, k, the probabilities and v rounded to
// bf16, every sum in f32), head_dim <= 128. A FlashAttention-style loop with WMMA 16x16x16 bf16
// fragments: a block of four warps takes 64 queries of one segment and head, keeps their scaled q
// in shared memory, and for each tile of 64 keys computes S = q kᵀ (tensor cores), the online
// softmax in f32 (running max and sum per row; P rounded to bf16), then O += P v (tensor cores),
// O kept in f32 in shared memory and rescaled per row between tiles.
#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/cuda/attention_tc.h"
#include "kernels/cuda/cuda_internal.h"

namespace mmrt::kernels::cuda {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kBq = 64, kBk = 64;  // queries per block, keys per tile
constexpr int kThreads = 128;      // four warps: each owns 16 query rows
constexpr int kMaxHd = 128;
constexpr int kTileSlot = 6;  // the step's attention metadata slot (attention_cuda.cu's kMetaSlot)

// One block's work: 64 queries [q0, q0 + n_q) of the segment starting at row `first` with `len`
// rows, for blockIdx.y's head.
struct Tile {
  int32_t first, len, q0;
};

// Shared memory of a block, head_dim `hd` (a multiple of 16): every array starts at a multiple of
// 128 bytes (WMMA loads want 32), and rows are padded (ld*) so that a fragment's 16 rows do not
// fall on the same banks (rows of 128 or 256 bytes would: up to 8-way conflicts).
constexpr int kLdS = kBk + 4, kLdP = kBk + 8;  // S (f32) and P (bf16) row pitches
struct Layout {
  size_t q, k, v, s, p, o, m, l, alpha, bytes;
  int ld_qkv, ld_o;  // q / k / v (bf16) and O (f32) row pitches
  __host__ __device__ explicit Layout(int hd) : ld_qkv(hd + 8), ld_o(hd + 4) {
    size_t at = 0;
    auto put = [&](size_t n) {
      const size_t here = at;
      at += (n + 127) / 128 * 128;
      return here;
    };
    q = put(size_t(kBq) * ld_qkv * 2);
    k = put(size_t(kBk) * ld_qkv * 2);
    v = put(size_t(kBk) * ld_qkv * 2);
    s = put(size_t(kBq) * kLdS * 4);
    p = put(size_t(kBq) * kLdP * 2);
    o = put(size_t(kBq) * ld_o * 4);
    m = put(kBq * 4);
    l = put(kBq * 4);
    alpha = put(kBq * 4);
    bytes = at;
  }
};

__global__ void __launch_bounds__(kThreads) flash_kernel(VarlenAttentionArgs a, const Tile* tiles) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int hd = a.head_dim;
  const Layout L(hd);
  auto* qs = reinterpret_cast<__nv_bfloat16*>(smem + L.q);
  auto* ks = reinterpret_cast<__nv_bfloat16*>(smem + L.k);
  auto* vs = reinterpret_cast<__nv_bfloat16*>(smem + L.v);
  auto* S = reinterpret_cast<float*>(smem + L.s);
  auto* P = reinterpret_cast<__nv_bfloat16*>(smem + L.p);
  auto* O = reinterpret_cast<float*>(smem + L.o);
  auto* m = reinterpret_cast<float*>(smem + L.m);
  auto* l = reinterpret_cast<float*>(smem + L.l);
  auto* alpha = reinterpret_cast<float*>(smem + L.alpha);
  const int ldq = L.ld_qkv, ldo = L.ld_o;

  const Tile t = tiles[blockIdx.x];
  const int h = blockIdx.y, hkv = h / (a.n_heads / a.n_kv_heads);
  const int n_q = min(kBq, t.len - t.q0);
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  // q (scaled, rounded to bf16; rows past the segment zero), O = 0, m = -inf, l = 0.
  for (int i = tid; i < kBq * hd; i += kThreads) {
    const int r = i / hd, d = i % hd;
    const float x = r < n_q ? a.q[(t.first + t.q0 + r) * a.q_stride + int64_t(h) * hd + d] : 0.f;
    qs[r * ldq + d] = __float2bfloat16_rn(x * a.scale);
    O[r * ldo + d] = 0.f;
  }
  for (int r = tid; r < kBq; r += kThreads) m[r] = -INFINITY, l[r] = 0.f;
  const int dt = hd / 16;
  for (int k0 = 0; k0 < t.len; k0 += kBk) {
    const int n_k = min(kBk, t.len - k0);
    __syncthreads();  // the last tile's readers are done with ks, vs, P
    for (int i = tid; i < kBk * hd; i += kThreads) {
      const int j = i / hd, d = i % hd;
      const int64_t row = t.first + k0 + j;
      const bool in = j < n_k;
      ks[j * ldq + d] =
          __float2bfloat16_rn(in ? a.k[row * a.k_stride + int64_t(hkv) * hd + d] : 0.f);
      vs[j * ldq + d] =
          __float2bfloat16_rn(in ? a.v[row * a.v_stride + int64_t(hkv) * hd + d] : 0.f);
    }
    __syncthreads();
    // S = q kᵀ: warp w computes rows [16w, 16w + 16) x all 64 keys.
    for (int jt = 0; jt < kBk / 16; ++jt) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int kk = 0; kk < dt; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, qs + (w * 16) * ldq + kk * 16, ldq);
        wmma::load_matrix_sync(fb, ks + (jt * 16) * ldq + kk * 16, ldq);  // kᵀ: column-major k
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(S + (w * 16) * kLdS + jt * 16, acc, kLdS, wmma::mem_row_major);
    }
    __syncwarp();
    // The online softmax of the warp's 16 rows: lanes over the 64 keys (two each).
    for (int rr = 0; rr < 16; ++rr) {
      const int r = w * 16 + rr;
      const float s0 = lane < n_k ? S[r * kLdS + lane] : -INFINITY;
      const float s1 = lane + 32 < n_k ? S[r * kLdS + lane + 32] : -INFINITY;
      float mx = fmaxf(s0, s1);
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = m[r], m_new = fmaxf(m_old, mx);  // finite: key 0 of the tile is in
      const float p0 = lane < n_k ? expf(s0 - m_new) : 0.f;
      const float p1 = lane + 32 < n_k ? expf(s1 - m_new) : 0.f;
      float sum = p0 + p1;
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      P[r * kLdP + lane] = __float2bfloat16_rn(p0);
      P[r * kLdP + lane + 32] = __float2bfloat16_rn(p1);
      const float c = m_old == -INFINITY ? 0.f : expf(m_old - m_new);
      __syncwarp();  // every lane has read m[r] and l[r]
      if (lane == 0) m[r] = m_new, l[r] = l[r] * c + sum, alpha[r] = c;
    }
    __syncwarp();
    // O's rows rescaled, then O += P v for the warp's rows (its own 16 rows of O and P).
    for (int i = lane; i < 16 * hd; i += 32) {
      const int r = w * 16 + i / hd;
      O[r * ldo + i % hd] *= alpha[r];
    }
    __syncwarp();
    for (int ct = 0; ct < dt; ++ct) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, O + (w * 16) * ldo + ct * 16, ldo, wmma::mem_row_major);
      for (int kk = 0; kk < kBk / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, P + (w * 16) * kLdP + kk * 16, kLdP);
        wmma::load_matrix_sync(fb, vs + (kk * 16) * ldq + ct * 16, ldq);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(O + (w * 16) * ldo + ct * 16, acc, ldo, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int i = tid; i < n_q * hd; i += kThreads) {
    const int r = i / hd, d = i % hd;
    a.out[(t.first + t.q0 + r) * a.out_stride + int64_t(h) * hd + d] =
        l[r] > 0.f ? O[r * ldo + d] / l[r] : 0.f;
  }
}

}  // namespace

void allow_tensor_core_attention_smem() {
  check(cudaFuncSetAttribute(flash_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(Layout(kMaxHd).bytes)),
        "cudaFuncSetAttribute");
}

bool tensor_core_attention(const Backend& be, const VarlenAttentionArgs& args) {
  const VarlenAttentionArgs& a = args;
  if (!a.bf16 || a.mask != MaskKind::kFull || a.head_dim > kMaxHd || a.head_dim % 16 != 0 ||
      a.n_heads > 65535)  // the grid's y: the exact kernel takes more heads
    return false;
  std::vector<Tile> tiles;
  for (size_t s = 0; s + 1 < a.cu_seqlens.size(); ++s) {
    const int32_t first = a.cu_seqlens[s], len = a.cu_seqlens[s + 1] - first;
    for (int32_t q0 = 0; q0 < len; q0 += kBq) tiles.push_back({first, len, q0});
  }
  if (tiles.empty()) return true;
  const unsigned blocks = row_blocks("varlen_attention", static_cast<int64_t>(tiles.size()));
  const auto* d_tiles = static_cast<const Tile*>(
      upload_scratch(be, kTileSlot, tiles.data(), tiles.size() * sizeof(Tile)));
  const Layout lay(a.head_dim);
  VarlenAttentionArgs k = a;
  k.cu_seqlens = {};  // host memory: the kernel reads the tiles
  const dim3 grid(blocks, static_cast<unsigned>(a.n_heads));
  launch(be, "varlen_attention (tensor cores)", flash_kernel, grid, kThreads, lay.bytes, k,
         d_tiles);
  return true;
}

}  // namespace mmrt::kernels::cuda
