// Internal: how the CPU backend's element-wise and layout kernels split rows over its pool.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/thread_pool.h"

namespace mmrt::kernels::cpu {

// Below this many elements a call runs on the calling thread (a fork-join costs a few us).
constexpr int64_t kParallelMin = 1 << 15;

// Runs fn(row_begin, row_end) over n rows of d elements, in parallel when it pays.
template <class Fn>
inline void for_rows(ThreadPool& pool, int64_t n, int64_t d, Fn&& fn) {
  if (n <= 1 || n * d < kParallelMin) {
    fn(int64_t{0}, n);
    return;
  }
  int64_t grain = std::max<int64_t>(1, kParallelMin / std::max<int64_t>(d, 1));
  pool.parallel_for(n, grain, fn);
}

// Same for a flat array of n elements, split into blocks of 4096.
template <class Fn>
inline void for_flat(ThreadPool& pool, int64_t n, Fn&& fn) {
  if (n < kParallelMin) {
    fn(int64_t{0}, n);
    return;
  }
  constexpr int64_t kBlock = 4096;
  pool.parallel_for((n + kBlock - 1) / kBlock, kParallelMin / kBlock, [&](int64_t b, int64_t e) {
    int64_t lo = b * kBlock, hi = std::min(n, e * kBlock);
    fn(lo, hi);
  });
}

}  // namespace mmrt::kernels::cpu
