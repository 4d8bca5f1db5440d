// The CUDA backend's attention (kernels/attention.h; the dispatcher checked the arguments) and
// its KV-cache writes and reads (kernels/kv_cache.h). One kernel for both: a block of four warps
// per (query row, head) and range of keys (split-kv where the rows alone would not fill the
// device: a few decode rows' keys split over blocks, merged by a second kernel);
// each warp scores 32 keys at a time, one per lane, with an online softmax in f32, reading K and
// V where they lie (paged blocks through the block table, or strided rows). Correct for every mask
// the CPU serves. Exact f32 products; where VarlenAttentionArgs::bf16 allows bf16 ones (the
// encoders, kFull masks) attention_tc_cuda.cu runs it on tensor cores instead.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/cuda/attention_tc.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_math.cuh"
#include "kernels/kv_cache.h"

namespace mmrt::kernels::cuda {

namespace {

constexpr int kWarps = 4;        // warps per block
constexpr int kTile = 32;        // keys per warp step: one per lane
constexpr int kMaxPerLane = 16;  // head_dim <= 512 = 32 lanes x 16
constexpr int kMaxHeadDim = 32 * kMaxPerLane;
constexpr int kMetaSlot = 6;     // scratch slot of the step's attention metadata
constexpr int kKvSlotsSlot = 7;  // scratch slot of a KV write's or read's slots
constexpr int kPartSlot = 10;    // scratch slot of the split-kv partial results

__device__ __forceinline__ float kv_load(const void* p, int64_t i, bool bf16) {
  if (!bf16) return static_cast<const float*>(p)[i];
  return bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// exp(a - b) that is 0 where a is -inf (a running max before any key), not NaN.
__device__ __forceinline__ float rescale(float a, float b) {
  return a == -INFINITY ? 0.f : expf(a - b);
}

// One (query row, head) of a launch: its q and output rows, how many keys it sees, where they are.
struct Item {
  const float* q;
  float* out;
  int32_t n_keys, hkv;
  const int32_t* table;  // paged: the sequence's block table
  int64_t first;         // varlen: the segment's first row
};

// Per query row of a paged batch: its row in q / out, its sequence, how many keys it sees.
struct PagedRow {
  int32_t q_row, seq, n_keys;
};
struct PagedSeq {
  int32_t table_off;  // into the flattened block tables
};

// Keys and values in the paged cache: K blocks [kv head][d][slot], V blocks [kv head][slot][d].
struct PagedSrc {
  const float* q;
  float* out;
  int64_t q_stride, out_stride;
  const PagedRow* rows;
  const PagedSeq* seqs;
  const int32_t* tables;
  const void *k, *v;
  bool bf16;
  int32_t n_heads, hk, hd, bs;
  __device__ Item item(int64_t i) const {
    const PagedRow r = rows[i / n_heads];
    const int32_t h = static_cast<int32_t>(i % n_heads);
    return {q + r.q_row * q_stride + int64_t(h) * hd,
            out + r.q_row * out_stride + int64_t(h) * hd,
            r.n_keys,
            h / (n_heads / hk),
            tables + seqs[r.seq].table_off,
            0};
  }
  // Element d of key j is at k_at(it, j) + d * k_step(); of value j at v_at(it, j) + d.
  __device__ int64_t k_at(const Item& it, int32_t j) const {
    return ((int64_t(it.table[j / bs]) * hk + it.hkv) * hd) * bs + j % bs;
  }
  __device__ int64_t k_step() const { return bs; }
  __device__ int64_t v_at(const Item& it, int32_t j) const {
    return ((int64_t(it.table[j / bs]) * hk + it.hkv) * bs + j % bs) * hd;
  }
};

void sign_struct(const Backend& be, const PagedSrc& s) {
  sign_args(be, s.q, s.out, s.q_stride, s.out_stride, s.rows, s.seqs, s.tables, s.k, s.v, s.bf16,
            s.n_heads, s.hk, s.hd, s.bs);
}

// Keys and values as strided rows of f32 (the encoders' fused q|k|v), segments by cu_seqlens.
struct VarlenSrc {
  VarlenAttentionArgs a;
  const int32_t* cu;
  int32_t n_seqs;
  const void *k, *v;
  bool bf16;  // always false: f32 rows
  __device__ Item item(int64_t i) const {
    const int64_t row = i / a.n_heads;
    const int32_t h = static_cast<int32_t>(i % a.n_heads);
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
    return {a.q + row * a.q_stride + int64_t(h) * hd,
            a.out + row * a.out_stride + int64_t(h) * hd,
            n_keys,
            h / (a.n_heads / a.n_kv_heads),
            nullptr,
            first};
  }
  __device__ int64_t k_at(const Item& it, int32_t j) const {
    return (it.first + j) * a.k_stride + int64_t(it.hkv) * a.head_dim;
  }
  __device__ int64_t k_step() const { return 1; }
  __device__ int64_t v_at(const Item& it, int32_t j) const {
    return (it.first + j) * a.v_stride + int64_t(it.hkv) * a.head_dim;
  }
};

void sign_struct(const Backend& be, const VarlenSrc& s) {
  cuda::sign_struct(be, s.a);
  sign_args(be, s.cu, s.n_seqs, s.k, s.v, s.bf16);
}

// Attention of one (row, head) item over keys [split * split_keys, +split_keys) of the n_keys it
// sees: block (item, split) of kWarps warps. Each warp takes 32 keys at a time, one per lane (the
// dot products with q, whose scaled copy is in shared memory; a paged K block is [d][slot], so the
// lanes read consecutive slots), then adds the 32 values (lanes over d) with the online softmax's
// rescaling in f32. The warps' results merge in shared memory; with one split the block writes
// the output, else its (max, sum, unnormalised output) for merge_kernel.
template <class Src>
__global__ void __launch_bounds__(32 * kWarps)
    attend_kernel(Src src, int32_t hd, float scale, int32_t pass, float* part) {
  const int64_t index = blockIdx.x;
  const Item it = src.item(index);
  // The item's keys in gridDim.y parts of whole `pass`es (the last parts may be empty).
  const int32_t parts = static_cast<int32_t>(gridDim.y);
  const int32_t per = (it.n_keys + parts - 1) / parts;
  const int32_t split_keys = max(pass, (per + pass - 1) / pass * pass);
  const int32_t begin = static_cast<int32_t>(blockIdx.y) * split_keys;
  const int32_t end = min(it.n_keys, begin + split_keys);
  __shared__ float qs[kMaxHeadDim];
  __shared__ float wm[kWarps], wl[kWarps];
  __shared__ float wacc[kWarps][kMaxHeadDim];
  for (int d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = it.q[d] * scale;
  __syncthreads();
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  float m = -INFINITY, l = 0.f, acc[kMaxPerLane];
  for (int t = 0; t < kMaxPerLane; ++t) acc[t] = 0.f;
  const int64_t kstep = src.k_step();
  for (int32_t base = begin + w * kTile; base < end; base += kWarps * kTile) {
    const int32_t j = base + lane;
    float s = -INFINITY;
    if (j < end) {
      const int64_t kp = src.k_at(it, j);
      float dot = 0.f;
      for (int d = 0; d < hd; ++d) dot += qs[d] * kv_load(src.k, kp + d * kstep, src.bf16);
      s = dot;
    }
    const float m_new = fmaxf(m, warp_max(s));  // finite: lane 0's key is in range
    const float p = j < end ? expf(s - m_new) : 0.f;
    const float c = rescale(m, m_new);
    l = l * c + warp_sum(p);
    for (int t = 0; t < kMaxPerLane; ++t) acc[t] *= c;
    const int n = min(kTile, end - base);
    for (int jj = 0; jj < n; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      const int64_t vp = src.v_at(it, base + jj);
      for (int t = 0; t < kMaxPerLane; ++t) {
        const int d = lane + 32 * t;
        if (d < hd) acc[t] += pj * kv_load(src.v, vp + d, src.bf16);
      }
    }
    m = m_new;
  }
  if (lane == 0) wm[w] = m, wl[w] = l;
  for (int t = 0; t < kMaxPerLane; ++t) {
    const int d = lane + 32 * t;
    if (d < hd) wacc[w][d] = acc[t];
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int k = 0; k < kWarps; ++k) mx = fmaxf(mx, wm[k]);
  float sum = 0.f;
  for (int k = 0; k < kWarps; ++k) sum += wl[k] * rescale(wm[k], mx);
  const bool whole = gridDim.y == 1;
  float* pp = whole ? nullptr : part + (index * gridDim.y + blockIdx.y) * (hd + 2);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.f;
    for (int k = 0; k < kWarps; ++k) o += wacc[k][d] * rescale(wm[k], mx);
    if (whole)
      it.out[d] = sum > 0.f ? o / sum : 0.f;
    else
      pp[2 + d] = o;
  }
  if (!whole && threadIdx.x == 0) pp[0] = mx, pp[1] = sum;
}

// Merges the splits of each item: one warp per item.
template <class Src>
__global__ void merge_kernel(Src src, int64_t n_items, int32_t hd, int32_t n_splits,
                             const float* part) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (index >= n_items) return;
  const int lane = threadIdx.x & 31;
  const Item it = src.item(index);
  const float* pp = part + index * n_splits * (hd + 2);
  float mx = -INFINITY;
  for (int s = 0; s < n_splits; ++s) mx = fmaxf(mx, pp[s * (hd + 2)]);
  float sum = 0.f;
  for (int s = 0; s < n_splits; ++s) sum += pp[s * (hd + 2) + 1] * rescale(pp[s * (hd + 2)], mx);
  for (int d = lane; d < hd; d += 32) {
    float o = 0.f;
    for (int s = 0; s < n_splits; ++s)
      o += pp[s * (hd + 2) + 2 + d] * rescale(pp[s * (hd + 2)], mx);
    it.out[d] = sum > 0.f ? o / sum : 0.f;
  }
}

// Launches attend_kernel over every item and part of its keys, and merge_kernel where there is
// more than one part. The parts: kv_splits > 0 asks for that many; 0 as many as fill the device
// with the items alone (8 blocks per SM: a few decode rows over long contexts split, a prefill's
// many items never do). Never from the keys, so that a step graph replays one launch whatever
// the contexts, and an eager step divides its keys as a replayed one does (the same rounding).
// Each item divides its own keys among the parts in whole passes of the block's warps (128 keys;
// 32 where kv_splits asks, so that a test's few keys still make several parts).
template <class Src>
void run_attention(const Backend& be, const Src& src, int64_t n_items, int32_t hd, float scale,
                   int32_t kv_splits, const char* what) {
  const int64_t target = 8 * static_cast<int64_t>(sm_count(be));
  const int64_t n_splits =
      kv_splits > 0 ? kv_splits : std::clamp<int64_t>((target + n_items - 1) / n_items, 1, 1024);
  const int32_t pass = kv_splits > 0 ? kTile : kWarps * kTile;
  if (n_splits > 65535) throw InvalidArgument(std::string(what) + ": too many keys");
  float* part = nullptr;
  if (n_splits > 1)
    part = static_cast<float*>(device_scratch(
        be, kPartSlot,
        static_cast<size_t>(n_items) * static_cast<size_t>(n_splits) * (hd + 2) * sizeof(float)));
  const dim3 grid(row_blocks(what, n_items), static_cast<unsigned>(n_splits));
  launch(be, what, attend_kernel<Src>, grid, 32 * kWarps, 0, src, hd, scale, pass, part);
  if (n_splits == 1) return;
  const auto blocks = static_cast<unsigned>((n_items + kWarps - 1) / kWarps);
  launch(be, what, merge_kernel<Src>, blocks, 32 * kWarps, 0, src, n_items, hd,
         static_cast<int32_t>(n_splits), part);
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
    for (int32_t r = 0; r < s.n_q; ++r) {
      rows.push_back({s.q_begin + r, static_cast<int32_t>(sq.size() - 1), lim[size_t(r)]});
    }
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
  PagedSrc src{.q = a.q,
               .out = a.out,
               .q_stride = a.q_stride,
               .out_stride = a.out_stride,
               .rows = reinterpret_cast<const PagedRow*>(d),
               .seqs = reinterpret_cast<const PagedSeq*>(d + rows.size() * sizeof(PagedRow)),
               .tables = reinterpret_cast<const int32_t*>(d + rows.size() * sizeof(PagedRow) +
                                                          sq.size() * sizeof(PagedSeq)),
               .k = kv.k,
               .v = kv.v,
               .bf16 = kv.dtype == DType::kBF16,
               .n_heads = a.n_heads,
               .hk = kv.n_kv_heads,
               .hd = hd,
               .bs = bs};
  run_attention(be, src, static_cast<int64_t>(rows.size()) * a.n_heads, hd, a.scale, a.kv_splits,
                "paged_attention");
}

void varlen_attention(const Backend& be, const VarlenAttentionArgs& args) {
  if (tensor_core_attention(be, args)) return;  // the encoders' bf16 permission, kFull masks
  VarlenAttentionArgs a = args;                 // strides and scale as the dispatcher resolved them
  const int64_t n_tokens = a.cu_seqlens.back();
  const auto* cu = static_cast<const int32_t*>(
      upload_scratch(be, kMetaSlot, a.cu_seqlens.data(), a.cu_seqlens.size() * sizeof(int32_t)));
  const auto n_seqs = static_cast<int32_t>(a.cu_seqlens.size() - 1);
  a.cu_seqlens = {};  // host memory: the kernel reads `cu`
  const VarlenSrc src{.a = a, .cu = cu, .n_seqs = n_seqs, .k = a.k, .v = a.v, .bf16 = false};
  run_attention(be, src, n_tokens * a.n_heads, a.head_dim, a.scale, a.kv_splits,
                "varlen_attention");
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
  launch(be, "kv_write", kv_write_kernel, flat_blocks(count), kFlatThreads, 0, layer, k, v, ds, n,
         k_stride, v_stride);
}

void kv_read(const Backend& be, const KvLayerView& layer, const int32_t* slots, int64_t n, float* k,
             float* v) {
  const auto* ds = static_cast<const int32_t*>(
      upload_scratch(be, kKvSlotsSlot, slots, static_cast<size_t>(n) * sizeof(int32_t)));
  const int64_t count = n * layer.n_kv_heads * layer.head_dim;
  launch(be, "kv_read", kv_read_kernel, flat_blocks(count), kFlatThreads, 0, layer, ds, n, k, v);
}

}  // namespace

const AttentionOps kAttention{.paged_attention = &paged_attention,
                              .varlen_attention = &varlen_attention};
const KvOps kKv{.write = &kv_write, .read = &kv_read};

}  // namespace mmrt::kernels::cuda
