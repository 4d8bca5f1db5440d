#include "kernels/backend.h"

#include <algorithm>
#include <array>

#include "core/cpu.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/linear_impl.h"

namespace mmrt::kernels {

const char* device_name(Device d) {
  switch (d) {
    case Device::kCpu:
      return "cpu";
  }
  return "?";
}

struct Backend::Scratch {
  struct Buf {
    std::shared_ptr<void> p;
    size_t n = 0;
  };
  std::array<Buf, kScratchSlots> slots;
};

Backend::Backend(const BackendOptions& opts) {
  if (opts.threads < 0)
    throw InvalidArgument("backend: thread count must be >= 1 (or 0 for every CPU), got " +
                          std::to_string(opts.threads));
  const int n = opts.threads > 0 ? opts.threads : cpu_count();
  pool_ = std::make_unique<ThreadPool>(n);
  isa_ = std::min(opts.max_isa, best_isa());
  buffers_ = BufferCache::create(opts.buffer_cache_bytes);
  scratch_ = std::make_unique<Scratch[]>(static_cast<size_t>(n));
  gemm_ = detail::make_gemm_state(n);
}

Backend::~Backend() = default;

int Backend::threads() const {
  return pool_->size();
}

std::string Backend::describe() const {
  return std::string(device_name(device())) + ", " + std::to_string(threads()) +
         " threads, kernels up to " + std::string(isa_name(isa_));
}

void* Backend::scratch(int slot, size_t bytes) const {
  if (slot < 0 || slot >= kScratchSlots) throw InternalError("backend: bad scratch slot");
  Scratch::Buf& b =
      scratch_[static_cast<size_t>(pool_->thread_index())].slots[static_cast<size_t>(slot)];
  if (!b.p || b.n < bytes) {
    b.n = std::max<size_t>(bytes, 4096);
    b.p = aligned_alloc_shared(b.n);
  }
  return b.p.get();
}

}  // namespace mmrt::kernels
