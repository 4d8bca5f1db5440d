// The CUDA backend's attention (kernels/attention.h; the dispatcher checked the arguments) and
// its KV-cache writes and reads (kernels/kv_cache.h). A first, simple version: one warp per
// (query row, head) walks the keys its mask lets it see with an online softmax in f32 (running
// max and sum; each lane holds every 32nd dimension of q and of the output), reading K and V
// where they lie (paged blocks through the block table, or strided rows). Correct for every mask
// the CPU serves; the tiled prefill kernel and split-kv decode are still to come. Exact f32
// products: VarlenAttentionArgs::bf16 is a permission, not taken here.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_math.cuh"
#include "kernels/kv_cache.h"

namespace mmrt::kernels::cuda {

namespace {

constexpr int kWarps = 4;        // warps per block: one (row, head) each
constexpr int kMaxPerLane = 16;  // head_dim <= 512 = 32 lanes x 16
constexpr int kMetaSlot = 6;     // scratch slot of the step's attention metadata
constexpr int kKvSlotsSlot = 7;  // scratch slot of a KV write's or read's slots

__device__ __forceinline__ float kv_load(const void* p, int64_t i, bool bf16) {
  if (!bf16) return static_cast<const float*>(p)[i];
  return bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The online softmax over keys [0, n_keys) of one (row, head): key(j) / value(j) give the
// element d of key or value j.
template <class KeyAt, class ValueAt>
__device__ void attend(const float* q, float* out, int hd, float scale, int32_t n_keys,
                       KeyAt key_at, ValueAt value_at) {
  const int lane = threadIdx.x & 31;
  float qv[kMaxPerLane], acc[kMaxPerLane];
  for (int t = 0; t < kMaxPerLane; ++t) {
    const int d = lane + 32 * t;
    qv[t] = d < hd ? q[d] * scale : 0.f;
    acc[t] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int32_t j = 0; j < n_keys; ++j) {
    float part = 0.f;
    for (int t = 0; t < kMaxPerLane; ++t) {
      const int d = lane + 32 * t;
      if (d < hd) part += qv[t] * key_at(j, d);
    }
    const float s = warp_sum(part);
    const float m_new = fmaxf(m, s);
    const float c = expf(m - m_new), p = expf(s - m_new);
    l = l * c + p;
    for (int t = 0; t < kMaxPerLane; ++t) {
      const int d = lane + 32 * t;
      if (d < hd) acc[t] = acc[t] * c + p * value_at(j, d);
    }
    m = m_new;
  }
  const float inv = n_keys > 0 ? 1.0f / l : 0.f;
  for (int t = 0; t < kMaxPerLane; ++t) {
    const int d = lane + 32 * t;
    if (d < hd) out[d] = acc[t] * inv;
  }
}

// Per query row of a paged batch: its row in q / out, its sequence, how many keys it sees.
struct PagedRow {
  int32_t q_row, seq, n_keys;
};
struct PagedSeq {
  int32_t table_off;  // into the flattened block tables
};

__global__ void paged_kernel(const float* q, int64_t q_stride, float* out, int64_t out_stride,
                             const PagedRow* rows, int64_t n_rows, const PagedSeq* seqs,
                             const int32_t* tables, const void* k, const void* v, bool bf16,
                             int32_t n_heads, int32_t hk, int32_t hd, int32_t bs, float scale) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (item >= n_rows * n_heads) return;
  const PagedRow r = rows[item / n_heads];
  const int32_t h = static_cast<int32_t>(item % n_heads), hkv = h / (n_heads / hk);
  const int32_t* table = tables + seqs[r.seq].table_off;
  auto key_at = [&](int32_t j, int d) {
    const int64_t blk = table[j / bs];
    return kv_load(k, ((blk * hk + hkv) * hd + d) * bs + j % bs, bf16);
  };
  auto value_at = [&](int32_t j, int d) {
    const int64_t blk = table[j / bs];
    return kv_load(v, ((blk * hk + hkv) * bs + j % bs) * hd + d, bf16);
  };
  attend(q + r.q_row * q_stride + int64_t(h) * hd, out + r.q_row * out_stride + int64_t(h) * hd, hd,
         scale, r.n_keys, key_at, value_at);
}

__global__ void varlen_kernel(VarlenAttentionArgs a, const int32_t* cu, int32_t n_seqs,
                              int64_t n_tokens) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (item >= n_tokens * a.n_heads) return;
  const int64_t row = item / a.n_heads;
  const int32_t h = static_cast<int32_t>(item % a.n_heads), hkv = h / (a.n_heads / a.n_kv_heads);
  int32_t lo = 0, hi = n_seqs;  // the segment of `row`: cu[s] <= row < cu[s + 1]
  while (hi - lo > 1) {
    const int32_t mid = (lo + hi) / 2;
    if (cu[mid] <= row)
      lo = mid;
    else
      hi = mid;
  }
  const int64_t first = cu[lo];
  const int32_t n_keys =
      static_cast<int32_t>(a.mask == MaskKind::kFull ? cu[lo + 1] - first : row - first + 1);
  const int hd = a.head_dim;
  auto key_at = [&](int32_t j, int d) { return a.k[(first + j) * a.k_stride + hkv * hd + d]; };
  auto value_at = [&](int32_t j, int d) { return a.v[(first + j) * a.v_stride + hkv * hd + d]; };
  attend(a.q + row * a.q_stride + int64_t(h) * hd, a.out + row * a.out_stride + int64_t(h) * hd, hd,
         a.scale, n_keys, key_at, value_at);
}

unsigned warp_blocks(int64_t items) {
  const int64_t b = (items + kWarps - 1) / kWarps;
  if (b > 2147483647) throw InvalidArgument("attention: too many rows for one launch");
  return static_cast<unsigned>(b);
}

void paged_attention(const Backend& be, const PagedAttentionArgs& a, const KvLayerView& kv,
                     std::span<const AttnSeq> seqs) {
  // Strides and scale as the dispatcher resolved them.
  const int32_t hd = kv.head_dim, bs = kv.block_size;
  // The step's metadata in one upload: rows, then sequences, then the block tables.
  std::vector<PagedRow> rows;
  std::vector<PagedSeq> sq;
  std::vector<int32_t> tables, lim;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttnSeq& s = seqs[i];
    if (s.n_q == 0) continue;
    sq.push_back({static_cast<int32_t>(tables.size())});
    tables.insert(tables.end(), s.block_table, s.block_table + (s.kv_len + bs - 1) / bs);
    lim.resize(static_cast<size_t>(s.n_q));
    detail::query_key_limits(s.mask.kind, s.mask.bidirectional, s.kv_len, s.n_q, 0, s.n_q,
                             lim.data());
    for (int32_t r = 0; r < s.n_q; ++r)
      rows.push_back({s.q_begin + r, static_cast<int32_t>(sq.size() - 1), lim[size_t(r)]});
  }
  if (rows.empty()) return;
  std::vector<char> meta(rows.size() * sizeof(PagedRow) + sq.size() * sizeof(PagedSeq) +
                         tables.size() * sizeof(int32_t));
  char* p = meta.data();
  std::memcpy(p, rows.data(), rows.size() * sizeof(PagedRow));
  std::memcpy(p + rows.size() * sizeof(PagedRow), sq.data(), sq.size() * sizeof(PagedSeq));
  std::memcpy(p + rows.size() * sizeof(PagedRow) + sq.size() * sizeof(PagedSeq), tables.data(),
              tables.size() * sizeof(int32_t));
  const char* d = static_cast<const char*>(upload_scratch(be, kMetaSlot, meta.data(), meta.size()));
  const auto* d_rows = reinterpret_cast<const PagedRow*>(d);
  const auto* d_seqs = reinterpret_cast<const PagedSeq*>(d + rows.size() * sizeof(PagedRow));
  const auto* d_tables = reinterpret_cast<const int32_t*>(d + rows.size() * sizeof(PagedRow) +
                                                          sq.size() * sizeof(PagedSeq));
  const int64_t n_rows = static_cast<int64_t>(rows.size());
  paged_kernel<<<warp_blocks(n_rows * a.n_heads), 32 * kWarps, 0, stream_of(be)>>>(
      a.q, a.q_stride, a.out, a.out_stride, d_rows, n_rows, d_seqs, d_tables, kv.k, kv.v,
      kv.dtype == DType::kBF16, a.n_heads, kv.n_kv_heads, hd, bs, a.scale);
  check_launch("paged_attention");
}

void varlen_attention(const Backend& be, const VarlenAttentionArgs& args) {
  VarlenAttentionArgs a = args;  // strides and scale as the dispatcher resolved them
  const int64_t n_tokens = a.cu_seqlens.back();
  const auto* cu = static_cast<const int32_t*>(
      upload_scratch(be, kMetaSlot, a.cu_seqlens.data(), a.cu_seqlens.size() * sizeof(int32_t)));
  const int32_t n_seqs = static_cast<int32_t>(a.cu_seqlens.size() - 1);
  a.cu_seqlens = {};  // host memory: the kernel reads `cu`
  varlen_kernel<<<warp_blocks(n_tokens * a.n_heads), 32 * kWarps, 0, stream_of(be)>>>(a, cu, n_seqs,
                                                                                      n_tokens);
  check_launch("varlen_attention");
}

// ---- KV cache ----

__global__ void kv_write_kernel(KvLayerView layer, const float* k, const float* v,
                                const int32_t* slots, int64_t n, int64_t k_stride,
                                int64_t v_stride) {
  const int64_t hk = layer.n_kv_heads, hd = layer.head_dim, bs = layer.block_size;
  MMRT_CUDA_FOR(i, n * hk * hd) {
    const int64_t t = i / (hk * hd), h = (i / hd) % hk, d = i % hd;
    const int64_t blk = slots[t] / bs, off = slots[t] % bs, tile = (blk * hk + h) * hd * bs;
    const float kx = k[t * k_stride + h * hd + d], vx = v[t * v_stride + h * hd + d];
    if (layer.dtype == DType::kBF16) {
      auto* kd = static_cast<__nv_bfloat16*>(const_cast<void*>(layer.k));
      auto* vd = static_cast<__nv_bfloat16*>(const_cast<void*>(layer.v));
      kd[tile + d * bs + off] = __float2bfloat16_rn(kx);
      vd[tile + off * hd + d] = __float2bfloat16_rn(vx);
    } else {
      static_cast<float*>(const_cast<void*>(layer.k))[tile + d * bs + off] = kx;
      static_cast<float*>(const_cast<void*>(layer.v))[tile + off * hd + d] = vx;
    }
  }
}

__global__ void kv_read_kernel(KvLayerView layer, const int32_t* slots, int64_t n, float* k,
                               float* v) {
  const int64_t hk = layer.n_kv_heads, hd = layer.head_dim, bs = layer.block_size;
  const bool bf16 = layer.dtype == DType::kBF16;
  MMRT_CUDA_FOR(i, n * hk * hd) {
    const int64_t t = i / (hk * hd), h = (i / hd) % hk, d = i % hd;
    const int64_t blk = slots[t] / bs, off = slots[t] % bs, tile = (blk * hk + h) * hd * bs;
    k[i] = kv_load(layer.k, tile + d * bs + off, bf16);
    v[i] = kv_load(layer.v, tile + off * hd + d, bf16);
  }
}

void kv_write(const Backend& be, const KvLayerView& layer, const float* k, const float* v,
              const int32_t* slots, int64_t n, int64_t k_stride, int64_t v_stride) {
  const auto* ds = static_cast<const int32_t*>(
      upload_scratch(be, kKvSlotsSlot, slots, static_cast<size_t>(n) * sizeof(int32_t)));
  const int64_t count = n * layer.n_kv_heads * layer.head_dim;
  kv_write_kernel<<<flat_blocks(count), kFlatThreads, 0, stream_of(be)>>>(layer, k, v, ds, n,
                                                                          k_stride, v_stride);
  check_launch("kv_write");
}

void kv_read(const Backend& be, const KvLayerView& layer, const int32_t* slots, int64_t n, float* k,
             float* v) {
  const auto* ds = static_cast<const int32_t*>(
      upload_scratch(be, kKvSlotsSlot, slots, static_cast<size_t>(n) * sizeof(int32_t)));
  const int64_t count = n * layer.n_kv_heads * layer.head_dim;
  kv_read_kernel<<<flat_blocks(count), kFlatThreads, 0, stream_of(be)>>>(layer, ds, n, k, v);
  check_launch("kv_read");
}

}  // namespace

const AttentionOps kAttention{.paged_attention = &paged_attention,
                              .varlen_attention = &varlen_attention};
const KvOps kKv{.write = &kv_write, .read = &kv_read};

}  // namespace mmrt::kernels::cuda
