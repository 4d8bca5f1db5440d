#include "kernels/bandwidth.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>

#include "core/clock.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/linear_impl.h"

namespace mmrt::kernels {

namespace {
constexpr size_t kBlock = 64 * 1024;  // bytes per parallel_for item
}  // namespace

ReadBandwidth measure_read_bandwidth(ThreadPool& pool, size_t bytes, size_t window, int reps) {
  if (reps < 1) throw InvalidArgument("measure_read_bandwidth: reps must be >= 1");
  window = std::max<size_t>(window, size_t{1} << 20) / kBlock * kBlock;
  const size_t n_windows = std::max<size_t>(1, bytes / window);
  bytes = n_windows * window;
  const int64_t blocks_per_window = static_cast<int64_t>(window / kBlock);
  std::shared_ptr<void> buf = aligned_alloc_shared(bytes);
  auto* base = static_cast<uint8_t*>(buf.get());
  // First touch from the pool so pages are mapped before timing.
  pool.parallel_for(static_cast<int64_t>(bytes / kBlock), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      std::memset(base + i * kBlock, static_cast<int>(i & 0x7f), kBlock);
  });
  // The widest read loop of the selected kernel variant (the decode kernels' own loads).
  const detail::StreamReadFn read = detail::stream_read_fn();
  std::atomic<uint64_t> sink{0};
  ReadBandwidth best;
  for (int r = 0; r < reps; ++r) {
    Stopwatch pass;
    for (size_t w = 0; w < n_windows; ++w) {
      const uint8_t* wb = base + w * window;
      Stopwatch sw;
      pool.parallel_for(blocks_per_window, 4, [&](int64_t b, int64_t e) {
        const uint64_t s = read(wb + b * kBlock, static_cast<size_t>(e - b) * kBlock);
        sink.fetch_add(s, std::memory_order_relaxed);
      });
      const double s = sw.seconds();
      if (s > 0)
        best.window_gbs = std::max(best.window_gbs, static_cast<double>(window) / s * 1e-9);
    }
    const double s = pass.seconds();
    if (s > 0) best.pass_gbs = std::max(best.pass_gbs, static_cast<double>(bytes) / s * 1e-9);
  }
  return best;
}

double measure_read_bandwidth_gbs(ThreadPool& pool, size_t bytes, int reps) {
  return measure_read_bandwidth(pool, bytes, size_t{32} << 20, reps).pass_gbs;
}

}  // namespace mmrt::kernels
