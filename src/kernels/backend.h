// The compute backend: everything a kernel needs besides its operands, in one object that the
// owner of the compute (the engine, a benchmark, a test) creates and passes down explicitly.
//   - the thread pool the kernels split their work over;
//   - the kernel variant cap: each op family runs its best variant at or below isa() that the
//     CPU supports (tests make one backend per variant instead of forcing a global choice);
//   - memory: per-thread scratch for the kernels, the GEMM library's primitives and streams, and
//     the cache of large buffers media preprocessing recycles.
// There is no process-wide backend, pool or cache. A Backend is driven by one thread at a time
// (its pool serialises parallel regions; caller-side scratch assumes it).
//
// Where a GPU backend attaches: a second Device kind whose Backend owns a CUDA stream and a
// device allocator; Tensor gains a device tag; the executor asks the backend for KV memory; the
// op families gain a device-side table next to the CPU variants (see docs/ARCHITECTURE.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/buffer_cache.h"
#include "core/isa.h"

namespace mmrt {
class ThreadPool;
}

namespace mmrt::kernels {

namespace detail {
struct GemmState;  // oneDNN engine, primitive cache, per-thread streams (gemm_dnnl.cpp)
struct GemmStateDeleter {
  void operator()(GemmState* s) const;
};
}  // namespace detail

enum class Device : uint8_t { kCpu };
const char* device_name(Device d);  // "cpu"

struct BackendOptions {
  int threads = 0;                                // including the caller; 0: every online CPU
  Isa max_isa = Isa::kAvx512Bf16;                 // default: the best this CPU has
  size_t buffer_cache_bytes = size_t{512} << 20;  // idle media buffers kept (0: none)
};

class Backend {
 public:
  // Throws InvalidArgument for a negative thread count.
  explicit Backend(const BackendOptions& opts = {});
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  Device device() const { return Device::kCpu; }
  ThreadPool& pool() const { return *pool_; }
  int threads() const;
  // The highest kernel variant the op families may use: min(max_isa, what the CPU has).
  Isa isa() const { return isa_; }
  const BufferCache& buffers() const { return buffers_; }
  std::string describe() const;  // "cpu, 2 threads, kernels up to avx512bf16"

  // Reusable 64-byte aligned scratch of the calling pool thread (ThreadPool::thread_index);
  // `slot` in [0, kScratchSlots) selects an independent buffer. Valid until the same thread
  // asks for the same slot again.
  static constexpr int kScratchSlots = 4;
  void* scratch(int slot, size_t bytes) const;

  detail::GemmState& gemm_state() const { return *gemm_; }

 private:
  struct Scratch;
  std::unique_ptr<ThreadPool> pool_;
  Isa isa_;
  BufferCache buffers_;
  std::unique_ptr<Scratch[]> scratch_;  // [threads]
  std::unique_ptr<detail::GemmState, detail::GemmStateDeleter> gemm_;
};

}  // namespace mmrt::kernels
