// The compute backend: the interface an engine, a benchmark or a test computes through. One
// backend serves one device (kernels/registry.h makes them: `--device cpu|cuda[:N]`) and owns
//   - memory on its device: allocate() for weights, KV storage, encoder outputs and scratch;
//     host staging for copies (pinned on a GPU); every copy between host and device goes
//     through copy_to_device / copy_to_host and is counted (transfers());
//   - its op tables: one table per op family (ops.h, linear.h, rope.h, attention.h,
//     kv_cache.h, layout.h, sampling.h), each entry a function of this device. An op family's
//     public function dispatches on the backend's device first (its table), then, inside the CPU
//     backend, on the CPU's instruction set (IsaVariants). A table or entry the device lacks is
//     an Unimplemented error naming the op and the device; there is no silent host fallback,
//     and require() checks a model's whole list at load.
// Pointers an op takes for activations, weights and outputs are memory of the backend's device;
// step metadata (token ids, positions, block tables, slot lists, rotary angles, sampling rows) is
// host memory.
// There is no process-wide backend. A Backend is driven by one thread at a time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/isa.h"
#include "core/tensor.h"

namespace mmrt::kernels {

// Every op any device may implement, by name (the unit of require() and of error messages).
enum class Op : uint8_t {
  kRmsNorm,
  kLayerNorm,
  kLayerNormHeads,
  kAdd,
  kSiluMul,
  kGeluErf,
  kQuickGelu,
  kReluSquared,
  kSoftmax,
  kEmbedding,
  kLinear,
  kRopeAngles,
  kApplyRope,
  kPagedAttention,
  kVarlenAttention,
  kKvWrite,
  kKvRead,
  kCopy2d,
  kIm2col1d,
  kPatchify2d,
  kToF16,
  kFromF16,
  kEditLogits,
  kArgmaxRows,
  kTopKRows,
  kCount
};
const char* op_name(Op op);  // "rms_norm", "paged_attention", ...

// The op tables of one device (kernels/<family>.h define them); null: the device has none of
// the family.
struct ElementwiseOps;
struct LinearOps;
struct RopeOps;
struct AttentionOps;
struct KvOps;
struct LayoutOps;
struct SamplingOps;
struct OpTables {
  const ElementwiseOps* elementwise = nullptr;
  const LinearOps* linear = nullptr;
  const RopeOps* rope = nullptr;
  const AttentionOps* attention = nullptr;
  const KvOps* kv = nullptr;
  const LayoutOps* layout = nullptr;
  const SamplingOps* sampling = nullptr;
};

// Copies through a backend since it was made (host<->device; device-to-device).
struct TransferStats {
  uint64_t to_device = 0, to_device_bytes = 0;
  uint64_t to_host = 0, to_host_bytes = 0;
  uint64_t on_device = 0, on_device_bytes = 0;
};

// Settings of a backend (the device itself is create_backend's first argument).
struct BackendOptions {
  int threads = 0;                 // CPU: threads including the caller; 0: every online CPU
  Isa max_isa = Isa::kAvx512Bf16;  // CPU: the kernel variant cap (default: the best this CPU has)
  // CPU: scheduling niceness of the compute threads (0: normal); a server lowers it so that its
  // I/O threads are never starved by the model. The engine's step thread takes it too.
  int nice = 0;
  // Batch invariance: every row's result is the same bits whatever else the call computes (a
  // sequence's logits and KV are equal whether it runs alone or batched, its prompt in one chunk
  // or many, from a cached prefix or cold, decoded or prefilled). The CPU backend then runs
  // every linear on its matrix-vector kernels with one fixed reduction order per row and
  // attention without split-kv (docs/kernels-gemm.md, "Batch invariance"); prefill costs more. A
  // backend that cannot promise it refuses the option.
  bool batch_invariant = false;
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual Device device() const = 0;
  // "cpu, 2 threads, kernels up to avx512bf16"; "cuda:0, NVIDIA H200, 139.8 GiB".
  virtual std::string describe() const = 0;

  // ---- memory ----
  // `bytes` of device memory, 64-byte aligned (zeroed when `zero`), freed with its last owner.
  // ResourceExhausted when the device has no room.
  virtual std::shared_ptr<void> allocate(size_t bytes, bool zero = false) const = 0;
  // Host memory for staging copies (page-locked on a GPU; ordinary aligned memory on the CPU).
  virtual std::shared_ptr<void> allocate_staging(size_t bytes) const = 0;
  // An owning tensor of device memory.
  Tensor empty(DType dtype, Shape shape) const;
  Tensor zeros(DType dtype, Shape shape) const;

  // Counted copies. dst/src on the device are this backend's memory.
  void copy_to_device(void* dst, const void* host_src, size_t bytes) const;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) const;
  void copy_on_device(void* dst, const void* src, size_t bytes) const;
  // The tensor in this backend's memory: itself when it already is (a host tensor on the CPU:
  // no copy), else a contiguous copy (counted).
  Tensor upload(const Tensor& t) const;
  // A host copy of a tensor of this backend (itself when it is host memory).
  Tensor to_host(const Tensor& t) const;
  TransferStats transfers() const;
  // Waits for the device's queued work (a no-op where ops run synchronously).
  virtual void synchronize() const {}
  // The device's memory now: free and total bytes (the CPU: available and physical memory).
  struct MemoryInfo {
    uint64_t free = 0, total = 0;
  };
  virtual MemoryInfo memory() const = 0;
  // The device's memory read bandwidth in GB/s (1e9 bytes/s): the best of `reps` passes of its
  // widest read loop over `bytes` of its own memory (choose far above its caches). What the
  // decode benchmarks report their weight-streaming rate against.
  virtual double measure_read_bandwidth_gbs(size_t bytes, int reps = 5) const = 0;

  // ---- step graphs ----
  // A step's device work recorded once and replayed as one launch (CUDA graphs): the ops' host
  // code still runs at every replay (it computes the step's metadata), but launches nothing;
  // the graph runs when what the ops would have launched is what was recorded (the same kernels,
  // shapes, buffers and scalars; the metadata may differ).
  class StepGraph {
   public:
    virtual ~StepGraph() = default;
  };
  // Whether this device records step graphs (the CPU does not).
  virtual bool records_step_graphs() const { return false; }
  // Runs `step` eagerly on the buffers step graphs use, sizing them: every shape to be captured
  // runs so first (a capture cannot grow them, and a later one would move a recorded buffer).
  // Where nothing is recorded: runs `step`.
  virtual void size_step(const std::function<void()>& step) const { step(); }
  // Runs `step` with its device work recorded, not run: the graph, or null where the step
  // cannot be recorded (`why` says why: it allocated or synchronised, or the metadata did not
  // fit); then nothing ran. `step` must not read device results.
  virtual std::unique_ptr<StepGraph> capture_step(const std::function<void()>& step,
                                                  std::string* why) const;
  // Runs `step`'s host code against `g`: true when its launches were those recorded and the
  // graph now runs in their place; false when they differ, and then no device work ran (run
  // `step` again, eagerly).
  virtual bool replay_step(const StepGraph& g, const std::function<void()>& step) const;

  // ---- ops ----
  const OpTables& ops() const { return ops_; }
  bool has(Op op) const;
  // The ops of `ops` this device lacks (empty: it runs them all).
  std::vector<Op> missing(std::span<const Op> ops) const;
  // Throws Unimplemented listing every op of `ops` the device lacks, for `what` (e.g. "the
  // qwen2-vl decoder"), and the devices that have them.
  void require(std::span<const Op> ops, const std::string& what) const;
  void require(std::initializer_list<Op> ops, const std::string& what) const {
    require(std::span<const Op>(ops.begin(), ops.size()), what);
  }

 protected:
  enum class CopyKind : uint8_t { kToDevice, kToHost, kOnDevice };  // transfers() index
  explicit Backend(const OpTables& ops) : ops_(ops) {}
  virtual void copy_bytes(void* dst, const void* src, size_t bytes, CopyKind kind) const = 0;

 private:
  Tensor tensor(DType dtype, Shape shape, bool zero) const;
  void counted_copy(void* dst, const void* src, size_t bytes, CopyKind kind) const;

  OpTables ops_;
  mutable std::atomic<uint64_t> n_[3] = {}, bytes_[3] = {};
};

namespace detail {
// Unimplemented("<op> has no <device> kernel ..."): what a dispatcher throws for a null entry.
[[noreturn]] void throw_missing_op(const Backend& be, Op op);
// The entry `member` of `table`, or the missing-op error.
template <class Table, class Fn>
Fn entry(const Backend& be, const Table* table, Fn Table::*member, Op op) {
  Fn f = table ? table->*member : nullptr;
  if (!f) throw_missing_op(be, op);
  return f;
}
}  // namespace detail

}  // namespace mmrt::kernels
