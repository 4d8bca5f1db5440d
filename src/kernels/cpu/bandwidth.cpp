#include "kernels/cpu/bandwidth.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/clock.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/linear_impl.h"

namespace mmrt::kernels {

namespace {
constexpr size_t kBlock = 64 * 1024;  // bytes per parallel_for item
size_t round_block(size_t v) {
  return (v + kBlock / 2) / kBlock * kBlock;
}
}  // namespace

ReadStreamer::ReadStreamer(const CpuBackend& be, size_t bytes) : be_(be) {
  bytes_ = std::max<size_t>((bytes + kBlock - 1) / kBlock * kBlock, size_t{1} << 20);
  buf_ = aligned_alloc_shared(bytes_);
  auto* base = static_cast<uint8_t*>(buf_.get());
  // First touch from the pool so pages are mapped before timing.
  be_.pool().parallel_for(static_cast<int64_t>(bytes_ / kBlock), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      std::memset(base + i * kBlock, static_cast<int>(i & 0x7f), kBlock);
  });
}

double ReadStreamer::read_next(size_t window) {
  window = std::clamp(round_block(window), kBlock, bytes_);
  if (pos_ + window > bytes_) pos_ = 0;
  const auto* base = static_cast<const uint8_t*>(buf_.get()) + pos_;
  pos_ += window;
  const detail::StreamReadFn read = detail::stream_read_fn(be_.isa());
  const int64_t blocks = static_cast<int64_t>(window / kBlock);
  std::atomic<uint64_t> sum{0};
  Stopwatch sw;
  be_.pool().parallel_for(blocks, 4, [&](int64_t b, int64_t e) {
    sum.fetch_add(read(base + b * kBlock, static_cast<size_t>(e - b) * kBlock),
                  std::memory_order_relaxed);
  });
  const double s = sw.seconds();
  sink_ += sum.load();  // keeps the reads observable
  return s;
}

ReadBandwidth measure_read_bandwidth(const CpuBackend& be, size_t bytes, size_t window, int reps) {
  if (reps < 1) throw InvalidArgument("measure_read_bandwidth: reps must be >= 1");
  window = std::max<size_t>(round_block(window), size_t{1} << 20);
  const size_t n_windows = std::max<size_t>(1, bytes / window);
  ReadStreamer rs(be, n_windows * window);
  ReadBandwidth best;
  for (int r = 0; r < reps; ++r) {
    double pass = 0;
    for (size_t w = 0; w < n_windows; ++w) {
      const double s = rs.read_next(window);
      pass += s;
      if (s > 0)
        best.window_gbs = std::max(best.window_gbs, static_cast<double>(window) / s * 1e-9);
    }
    if (pass > 0)
      best.pass_gbs = std::max(best.pass_gbs, static_cast<double>(rs.bytes()) / pass * 1e-9);
  }
  return best;
}

double measure_read_bandwidth_gbs(const CpuBackend& be, size_t bytes, int reps) {
  return measure_read_bandwidth(be, bytes, size_t{32} << 20, reps).pass_gbs;
}

double CpuBackend::measure_read_bandwidth_gbs(size_t bytes, int reps) const {
  return kernels::measure_read_bandwidth_gbs(*this, bytes, reps);
}

}  // namespace mmrt::kernels
