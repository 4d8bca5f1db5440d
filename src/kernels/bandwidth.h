// Memory read bandwidth of this machine, measured the way the decode kernels use memory: every
// thread of a pool streams its own contiguous part of a buffer larger than the caches. The
// decode benchmarks report their weight-streaming rate as a fraction of this number.
#pragma once

#include <cstddef>

namespace mmrt {
class ThreadPool;
}

namespace mmrt::kernels {

struct ReadBandwidth {
  double pass_gbs = 0;    // best rate of one whole pass over the buffer
  double window_gbs = 0;  // best rate of one window (a shorter, separately timed slice)
};

// Streams `bytes` (rounded down to a multiple of `window`; at least one window) in consecutive
// windows of `window` bytes (rounded to 64 KiB, at least 1 MiB), each window split over all
// threads of `pool`; `reps` passes. Rates in GB/s (1e9 bytes per second). Choose `bytes` well
// above the last-level cache (e.g. 512 MiB) so every window comes from DRAM. The buffer is
// allocated, written once by the pool (first touch) and freed here. On a shared machine the
// best window is the better estimate of what an uncontended core pair gets.
ReadBandwidth measure_read_bandwidth(ThreadPool& pool, size_t bytes, size_t window, int reps);

// Best whole-pass rate with 32 MiB windows: measure_read_bandwidth(...).pass_gbs.
double measure_read_bandwidth_gbs(ThreadPool& pool, size_t bytes, int reps = 5);

}  // namespace mmrt::kernels
