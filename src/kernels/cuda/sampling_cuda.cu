// The CUDA backend's sampling kernels (kernels/sampling.h; the dispatchers checked the
// arguments). Nothing here sums values: the edits round once per operation (explicit _rn
// intrinsics, so nvcc cannot fuse a multiply and a subtraction the CPU rounds apart), argmax and
// top-k only compare, so every result is the CPU's bit for bit. Row lists and edits go up through
// scratch slot 8, results come back through slot 9 in one counted copy per call.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/sampling.h"

namespace mmrt::kernels::cuda {

namespace {

constexpr int kInSlot = 8, kOutSlot = 9;
constexpr int kTopKThreads = 1024;  // = kMaxDeviceTopK: one candidate per thread in the sort

__global__ void edit_kernel(float* x, int64_t stride, const LogitEdit* edits, int64_t n) {
  MMRT_CUDA_FOR(i, n) {
    const LogitEdit e = edits[i];
    float& l = x[e.row * stride + e.token];
    float v = l;
    if (e.scale != 1.0f) v = v > 0.0f ? __fdiv_rn(v, e.scale) : __fmul_rn(v, e.scale);
    l = __fsub_rn(v, e.subtract);
  }
}

// Whether (v, i) comes before (bv, bi) in argmax's order: NaN first, then larger, then lower id.
__device__ __forceinline__ bool argmax_before(float v, int64_t i, float bv, int64_t bi) {
  const bool vn = v != v, bn = bv != bv;
  if (vn != bn) return vn;
  if (!vn && v != bv) return v > bv;
  return i < bi;
}

__global__ void argmax_kernel(const float* x, int64_t stride, int64_t vocab, const int32_t* rows,
                              int32_t* out) {
  const float* xr = x + rows[blockIdx.x] * stride;
  float best = -INFINITY;
  int64_t at = INT64_MAX;  // loses to any element, -inf included
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
    if (argmax_before(xr[i], i, best, at)) best = xr[i], at = i;
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best, o);
    const int64_t i = __shfl_xor_sync(0xffffffffu, at, o);
    if (argmax_before(v, i, best, at)) best = v, at = i;
  }
  __shared__ float wv[32];
  __shared__ int64_t wi[32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  if (lane == 0) wv[w] = best, wi[w] = at;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < static_cast<int>(blockDim.x >> 5); ++k)
      if (argmax_before(wv[k], wi[k], best, at)) best = wv[k], at = wi[k];
    out[blockIdx.x] = static_cast<int32_t>(at);
  }
}

// A top-k row as the kernel reads it: where its k candidates go in the output.
struct TopKJob {
  int32_t row, k;
  float temperature;
  int32_t out;
};
struct Candidate {
  float value;
  int32_t id;
};

// An order-preserving integer key of a float: larger float, larger key; -0 and +0 the same key
// (they compare equal, so the id decides, as on the CPU); NaN the smallest key.
__device__ __forceinline__ uint32_t order_key(float v) {
  if (v != v) return 0u;
  if (v == 0.0f) v = 0.0f;
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Whether candidate a (key ka, id ia) comes before b: larger key first, then the lower id.
__device__ __forceinline__ bool topk_before(uint32_t ka, int32_t ia, uint32_t kb, int32_t ib) {
  return ka != kb ? ka > kb : ia < ib;
}

// The exclusive prefix sum over the block of one flag per thread, and the block's total.
__device__ int block_exclusive_scan(int flag, int* total) {
  __shared__ int warp_sum[32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const unsigned ballot = __ballot_sync(0xffffffffu, flag);
  const int in_warp = __popc(ballot & ((1u << lane) - 1u));
  __syncthreads();  // an earlier call's readers are done with warp_sum
  if (lane == 0) warp_sum[w] = __popc(ballot);
  __syncthreads();
  int before = 0, all = 0;
  for (int k = 0; k < static_cast<int>(blockDim.x >> 5); ++k) {
    before += k < w ? warp_sum[k] : 0;
    all += warp_sum[k];
  }
  *total = all;
  return before + in_warp;
}

// One block of kTopKThreads per row: a radix select (four passes of 8 bits) finds the k-th
// largest key, one pass in id order gathers the keys above it and the first equal ones, and a
// bitonic sort in shared memory orders the k.
__global__ void __launch_bounds__(kTopKThreads)
    top_k_kernel(const float* x, int64_t stride, int64_t vocab, const TopKJob* jobs,
                 Candidate* out) {
  const TopKJob job = jobs[blockIdx.x];
  const float* xr = x + job.row * stride;
  const float t = job.temperature;
  __shared__ unsigned hist[256];
  __shared__ uint32_t prefix, mask;
  __shared__ int remaining;
  if (threadIdx.x == 0) prefix = 0, mask = 0, remaining = job.k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const uint32_t key = order_key(__fdiv_rn(xr[i], t));
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int above = 0, d = 255;
      for (; d > 0; --d) {
        if (above + static_cast<int>(hist[d]) >= remaining) break;
        above += static_cast<int>(hist[d]);
      }
      remaining -= above;
      prefix |= static_cast<uint32_t>(d) << shift;
      mask |= 255u << shift;
    }
    __syncthreads();
  }
  // prefix: the k-th largest key; remaining: how many of the keys equal to it are taken (the
  // lowest ids), after the k - remaining keys above it.
  __shared__ uint32_t keys[kTopKThreads];
  __shared__ int32_t ids[kTopKThreads];
  __shared__ float values[kTopKThreads];
  __shared__ int n_above, n_equal;
  if (threadIdx.x == 0) n_above = 0, n_equal = 0;
  __syncthreads();
  const uint32_t kth = prefix;
  const int take_equal = remaining, first_equal = job.k - remaining;
  for (int64_t base = 0; base < vocab; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    float v = 0.0f;
    uint32_t key = 0;
    if (i < vocab) {
      v = __fdiv_rn(xr[i], t);
      key = order_key(v);
      if (key > kth) {
        const int at = atomicAdd(&n_above, 1);
        keys[at] = key, ids[at] = static_cast<int32_t>(i), values[at] = v;
      }
    }
    int total = 0;
    const int pos = block_exclusive_scan(i < vocab && key == kth, &total);
    if (i < vocab && key == kth && n_equal + pos < take_equal) {
      const int at = first_equal + n_equal + pos;
      keys[at] = key, ids[at] = static_cast<int32_t>(i), values[at] = v;
    }
    __syncthreads();  // every thread has read n_equal
    if (threadIdx.x == 0) n_equal += total;
    __syncthreads();
  }
  int n2 = 1;
  while (n2 < job.k) n2 <<= 1;
  for (int j = job.k + static_cast<int>(threadIdx.x); j < n2; j += blockDim.x)
    keys[j] = 0, ids[j] = INT32_MAX, values[j] = 0.0f;  // after every real candidate
  __syncthreads();
  for (int size = 2; size <= n2; size <<= 1) {
    for (int half = size >> 1; half > 0; half >>= 1) {
      for (int a = threadIdx.x; a < n2; a += blockDim.x) {
        const int b = a ^ half;
        if (b <= a) continue;
        const bool first_up = (a & size) == 0;  // a should come before b
        const bool b_before = topk_before(keys[b], ids[b], keys[a], ids[a]);
        if (b_before == first_up) {
          const uint32_t kk = keys[a];
          keys[a] = keys[b], keys[b] = kk;
          const int32_t ii = ids[a];
          ids[a] = ids[b], ids[b] = ii;
          const float vv = values[a];
          values[a] = values[b], values[b] = vv;
        }
      }
      __syncthreads();
    }
  }
  for (int j = threadIdx.x; j < job.k; j += blockDim.x) out[job.out + j] = {values[j], ids[j]};
}

void edit_logits(const Backend& be, float* x, int64_t stride, std::span<const LogitEdit> edits) {
  const auto* dev = static_cast<const LogitEdit*>(
      upload_scratch(be, kInSlot, edits.data(), edits.size() * sizeof(LogitEdit)));
  const auto n = static_cast<int64_t>(edits.size());
  launch(be, "edit_logits", edit_kernel, flat_blocks(n), kFlatThreads, 0, x, stride, dev, n);
}

void argmax_rows(const Backend& be, const float* x, int64_t stride, int64_t vocab,
                 std::span<const int32_t> rows, int32_t* out) {
  const auto* dev_rows = static_cast<const int32_t*>(
      upload_scratch(be, kInSlot, rows.data(), rows.size() * sizeof(int32_t)));
  auto* dev_out = static_cast<int32_t*>(device_scratch(be, kOutSlot, rows.size() * 4));
  launch(be, "argmax_rows", argmax_kernel,
         row_blocks("argmax_rows", static_cast<int64_t>(rows.size())), kRowThreads, 0, x, stride,
         vocab, dev_rows, dev_out);
  be.copy_to_host(out, dev_out, rows.size() * sizeof(int32_t));
}

void top_k_rows(const Backend& be, const float* x, int64_t stride, int64_t vocab,
                std::span<const TopKRow> rows, std::pair<float, int32_t>* out) {
  std::vector<TopKJob> jobs(rows.size());
  int32_t total = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    jobs[i] = {rows[i].row, rows[i].k, rows[i].temperature, total};
    total += rows[i].k;
  }
  const auto* dev_jobs = static_cast<const TopKJob*>(
      upload_scratch(be, kInSlot, jobs.data(), jobs.size() * sizeof(TopKJob)));
  auto* dev_out = static_cast<Candidate*>(
      device_scratch(be, kOutSlot, static_cast<size_t>(total) * sizeof(Candidate)));
  launch(be, "top_k_rows", top_k_kernel,
         row_blocks("top_k_rows", static_cast<int64_t>(rows.size())), kTopKThreads, 0, x, stride,
         vocab, dev_jobs, dev_out);
  std::vector<Candidate> host(static_cast<size_t>(total));
  be.copy_to_host(host.data(), dev_out, host.size() * sizeof(Candidate));
  for (size_t i = 0; i < host.size(); ++i) out[i] = {host[i].value, host[i].id};
}

}  // namespace

const SamplingOps kSampling{
    .edit_logits = &edit_logits,
    .argmax_rows = &argmax_rows,
    .top_k_rows = &top_k_rows,
};

}  // namespace mmrt::kernels::cuda
