// The CPU backend: host memory, a thread pool the kernels split their work over, and the kernel
// variant cap (each op family runs its best variant at or below isa() that the CPU supports;
// tests make one backend per variant instead of forcing a global choice). Per-thread scratch and
// the GEMM library's primitives and streams live here too.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "core/isa.h"
#include "kernels/backend.h"
#include "kernels/registry.h"

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

// Not final: the tests' EmulatedDevice (tests/common) runs these kernels on memory it calls a
// GPU's, to find model code that hands an op host memory or reads device memory on the host.
class CpuBackend : public Backend {
 public:
  // Throws InvalidArgument for a negative thread count.
  explicit CpuBackend(const BackendOptions& opts = {});
  ~CpuBackend() override;

  Device device() const override { return {}; }
  std::string describe() const override;  // "cpu, 2 threads, kernels up to avx512bf16"
  MemoryInfo memory() const override;
  double measure_read_bandwidth_gbs(size_t bytes, int reps = 5) const override;
  // 64-byte aligned; 4 MiB and more on 2 MiB pages where the OS grants them.
  std::shared_ptr<void> allocate(size_t bytes, bool zero = false) const override;
  std::shared_ptr<void> allocate_staging(size_t bytes) const override;

  ThreadPool& pool() const { return *pool_; }
  int threads() const;
  // The highest kernel variant the op families may use: min(max_isa, what the CPU has).
  Isa isa() const { return isa_; }
  // BackendOptions::batch_invariant: the op families keep one reduction order per row.
  bool batch_invariant() const { return batch_invariant_; }

  // Reusable 64-byte aligned scratch of the calling pool thread (ThreadPool::thread_index);
  // `slot` in [0, kScratchSlots) selects an independent buffer. Valid until the same thread
  // asks for the same slot again.
  static constexpr int kScratchSlots = 4;
  void* scratch(int slot, size_t bytes) const;

  detail::GemmState& gemm_state() const { return *gemm_; }

 protected:
  void copy_bytes(void* dst, const void* src, size_t bytes, CopyKind kind) const override;

 private:
  struct Scratch;
  std::unique_ptr<ThreadPool> pool_;
  Isa isa_;
  bool batch_invariant_ = false;
  std::unique_ptr<Scratch[]> scratch_;  // [threads]
  std::unique_ptr<detail::GemmState, detail::GemmStateDeleter> gemm_;
};

// The CPU backend behind `be` (InternalError for another device: only CPU op tables call it).
const CpuBackend& as_cpu(const Backend& be);

namespace cpu {
// The registry's entry (kernels/registry.cpp).
BackendEntry backend_entry();

// Adapts a CPU kernel `R f(const CpuBackend&, A...)` to an op table entry `R (const Backend&,
// A...)`: the tables are this backend's, so the backend they get is the CPU's.
template <auto F>
struct OnCpu;
template <class R, class... A, R (*F)(const CpuBackend&, A...)>
struct OnCpu<F> {
  static R call(const Backend& be, A... a) {
    return F(static_cast<const CpuBackend&>(be), std::forward<A>(a)...);
  }
};
}  // namespace cpu

}  // namespace mmrt::kernels
