#include "kernels/cpu/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "core/cpu.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/linear_impl.h"

namespace mmrt::kernels {

namespace {

// The CPU's op tables: every op, each entry the CPU kernel behind OnCpu's cast.
using cpu::OnCpu;
const ElementwiseOps kElementwise{
    .rms_norm = &OnCpu<&cpu::rms_norm>::call,
    .layer_norm = &OnCpu<&cpu::layer_norm>::call,
    .layer_norm_heads = &OnCpu<&cpu::layer_norm_heads>::call,
    .add = &OnCpu<&cpu::add>::call,
    .silu_mul = &OnCpu<&cpu::silu_mul>::call,
    .gelu_erf = &OnCpu<&cpu::gelu_erf>::call,
    .quick_gelu = &OnCpu<&cpu::quick_gelu>::call,
    .relu_squared = &OnCpu<&cpu::relu_squared>::call,
    .softmax = &OnCpu<&cpu::softmax>::call,
    .embedding = &OnCpu<&cpu::embedding>::call,
};
const LinearOps kLinear{
    .pack = &OnCpu<&cpu::pack_linear>::call,
    .linear = &OnCpu<&cpu::linear>::call,
    .plan = &OnCpu<&cpu::linear_plan>::call,
};
const RopeOps kRope{
    .rope_angles = &OnCpu<&cpu::rope_angles>::call,
    .apply_rope = &OnCpu<&cpu::apply_rope>::call,
};
const AttentionOps kAttention{
    .paged_attention = &OnCpu<&cpu::paged_attention>::call,
    .varlen_attention = &OnCpu<&cpu::varlen_attention>::call,
    .varlen_int8_scores = &OnCpu<&cpu::varlen_int8_scores>::call,
};
const KvOps kKv{
    .write = &OnCpu<&cpu::kv_write>::call,
    .read = &OnCpu<&cpu::kv_read>::call,
};
const LayoutOps kLayout{
    .copy2d = &OnCpu<&cpu::copy2d>::call,
    .im2col_1d = &OnCpu<&cpu::im2col_1d>::call,
    .patchify_2d = &OnCpu<&cpu::patchify_2d>::call,
    .to_f16 = &OnCpu<&cpu::to_f16>::call,
    .from_f16 = &OnCpu<&cpu::from_f16>::call,
};
const SamplingOps kSampling{
    .edit_logits = &OnCpu<&cpu::edit_logits>::call,
    .argmax_rows = &OnCpu<&cpu::argmax_rows>::call,
    .top_k_rows = &OnCpu<&cpu::top_k_rows>::call,
};
const OpTables kCpuOps{.elementwise = &kElementwise,
                       .linear = &kLinear,
                       .rope = &kRope,
                       .attention = &kAttention,
                       .kv = &kKv,
                       .layout = &kLayout,
                       .sampling = &kSampling};

DeviceDiscovery discover_cpu() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  DeviceInfo d{.device = {},
               .name = "x86-64 CPU (kernels up to " + std::string(isa_name(best_isa())) + ")",
               .memory_bytes = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0,
               .detail = std::to_string(cpu_count()) + " cores"};
  return {.devices = {d}};
}

std::unique_ptr<Backend> create_cpu(Device, const BackendOptions& opts) {
  return std::make_unique<CpuBackend>(opts);
}

}  // namespace

namespace cpu {
BackendEntry backend_entry() {
  return {.kind = DeviceKind::kCpu, .discover = &discover_cpu, .create = &create_cpu};
}
}  // namespace cpu

const CpuBackend& as_cpu(const Backend& be) {
  if (!be.device().is_host())
    throw InternalError("a CPU kernel was handed the " + device_str(be.device()) + " backend");
  return static_cast<const CpuBackend&>(be);
}

struct CpuBackend::Scratch {
  struct Buf {
    std::shared_ptr<void> p;
    size_t n = 0;
  };
  std::array<Buf, kScratchSlots> slots;
};

CpuBackend::CpuBackend(const BackendOptions& opts) : Backend(kCpuOps) {
  if (opts.threads < 0)
    throw InvalidArgument("backend: thread count must be >= 1 (or 0 for every CPU), got " +
                          std::to_string(opts.threads));
  const int n = opts.threads > 0 ? opts.threads : cpu_count();
  pool_ = std::make_unique<ThreadPool>(n, opts.nice);
  isa_ = std::min(opts.max_isa, best_isa());
  batch_invariant_ = opts.batch_invariant;
  scratch_ = std::make_unique<Scratch[]>(static_cast<size_t>(n));
  gemm_ = detail::make_gemm_state(n);
}

CpuBackend::~CpuBackend() = default;

int CpuBackend::threads() const {
  return pool_->size();
}

std::string CpuBackend::describe() const {
  return "cpu, " + std::to_string(threads()) + " threads, kernels up to " +
         std::string(isa_name(isa_)) + (batch_invariant_ ? ", batch-invariant" : "");
}

Backend::MemoryInfo CpuBackend::memory() const {
  const long page = sysconf(_SC_PAGE_SIZE), avail = sysconf(_SC_AVPHYS_PAGES),
             phys = sysconf(_SC_PHYS_PAGES);
  if (page <= 0) return {};
  return {.free = avail > 0 ? uint64_t(avail) * uint64_t(page) : 0,
          .total = phys > 0 ? uint64_t(phys) * uint64_t(page) : 0};
}

std::shared_ptr<void> CpuBackend::allocate(size_t bytes, bool zero) const {
  return aligned_alloc_shared(bytes, zero);
}

std::shared_ptr<void> CpuBackend::allocate_staging(size_t bytes) const {
  return aligned_alloc_shared(bytes);
}

void CpuBackend::copy_bytes(void* dst, const void* src, size_t bytes, CopyKind) const {
  std::memcpy(dst, src, bytes);
}

void* CpuBackend::scratch(int slot, size_t bytes) const {
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
