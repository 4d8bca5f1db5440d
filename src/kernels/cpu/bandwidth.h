// Memory read bandwidth of this machine, measured the way the decode kernels use memory: every
// thread of a pool streams its own contiguous part of a buffer larger than the caches. The
// decode benchmarks report their weight-streaming rate as a fraction of this number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cpu/cpu_backend.h"

namespace mmrt::kernels {

// A buffer (meant to be larger than the last-level cache) streamed window by window with all
// threads of the backend's pool, using the widest read loop of its kernel variant. Benchmarks time
// a window next to a kernel call of the same size, so both see the same machine load.
class ReadStreamer {
 public:
  // Allocates `bytes` (rounded up to 64 KiB, at least 1 MiB) and writes it once from the pool.
  ReadStreamer(const CpuBackend& be, size_t bytes);
  size_t bytes() const { return bytes_; }
  // Reads the next `window` bytes (rounded to 64 KiB, 64 KiB .. bytes()), wrapping around the
  // buffer; returns the elapsed seconds.
  double read_next(size_t window);

 private:
  const CpuBackend& be_;
  std::shared_ptr<void> buf_;
  size_t bytes_ = 0, pos_ = 0;
  uint64_t sink_ = 0;
};

struct ReadBandwidth {
  double pass_gbs = 0;    // best rate of one whole pass over the buffer
  double window_gbs = 0;  // best rate of one window (a shorter, separately timed slice)
};

// Streams `bytes` in consecutive windows of `window` bytes, `reps` passes; rates in GB/s
// (1e9 bytes per second). Choose `bytes` well above the last-level cache (e.g. 512 MiB) so every
// window comes from DRAM. On a shared machine the best window is the better estimate of what an
// uncontended set of cores gets.
ReadBandwidth measure_read_bandwidth(const CpuBackend& be, size_t bytes, size_t window, int reps);

// Best whole-pass rate with 32 MiB windows: measure_read_bandwidth(...).pass_gbs.
double measure_read_bandwidth_gbs(const CpuBackend& be, size_t bytes, int reps = 5);

}  // namespace mmrt::kernels
