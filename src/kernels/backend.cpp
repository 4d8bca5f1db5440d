// The device-independent half of every backend: counted copies, tensors of device memory, the
// op list and the missing-op errors.
#include "kernels/backend.h"

#include <iterator>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/kv_cache.h"
#include "kernels/layout.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "kernels/registry.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"

namespace mmrt::kernels {

namespace {

// Whether table `T`'s entry `M` is set in `t` (a null table has none).
template <auto Table, auto Member>
bool has_entry(const OpTables& t) {
  const auto* table = t.*Table;
  return table && table->*Member != nullptr;
}

struct OpInfo {
  const char* name;
  bool (*has)(const OpTables&);
};

// The one list of ops: each op's name and its table entry, in Op's order.
constexpr OpInfo kOps[] = {
    {"rms_norm", &has_entry<&OpTables::elementwise, &ElementwiseOps::rms_norm>},
    {"layer_norm", &has_entry<&OpTables::elementwise, &ElementwiseOps::layer_norm>},
    {"layer_norm_heads", &has_entry<&OpTables::elementwise, &ElementwiseOps::layer_norm_heads>},
    {"add", &has_entry<&OpTables::elementwise, &ElementwiseOps::add>},
    {"silu_mul", &has_entry<&OpTables::elementwise, &ElementwiseOps::silu_mul>},
    {"gelu_erf", &has_entry<&OpTables::elementwise, &ElementwiseOps::gelu_erf>},
    {"quick_gelu", &has_entry<&OpTables::elementwise, &ElementwiseOps::quick_gelu>},
    {"relu_squared", &has_entry<&OpTables::elementwise, &ElementwiseOps::relu_squared>},
    {"softmax", &has_entry<&OpTables::elementwise, &ElementwiseOps::softmax>},
    {"embedding", &has_entry<&OpTables::elementwise, &ElementwiseOps::embedding>},
    {"linear", &has_entry<&OpTables::linear, &LinearOps::linear>},
    {"rope_angles", &has_entry<&OpTables::rope, &RopeOps::rope_angles>},
    {"apply_rope", &has_entry<&OpTables::rope, &RopeOps::apply_rope>},
    {"paged_attention", &has_entry<&OpTables::attention, &AttentionOps::paged_attention>},
    {"varlen_attention", &has_entry<&OpTables::attention, &AttentionOps::varlen_attention>},
    {"kv_write", &has_entry<&OpTables::kv, &KvOps::write>},
    {"kv_read", &has_entry<&OpTables::kv, &KvOps::read>},
    {"copy2d", &has_entry<&OpTables::layout, &LayoutOps::copy2d>},
    {"im2col_1d", &has_entry<&OpTables::layout, &LayoutOps::im2col_1d>},
    {"patchify_2d", &has_entry<&OpTables::layout, &LayoutOps::patchify_2d>},
    {"to_f16", &has_entry<&OpTables::layout, &LayoutOps::to_f16>},
    {"from_f16", &has_entry<&OpTables::layout, &LayoutOps::from_f16>},
    {"edit_logits", &has_entry<&OpTables::sampling, &SamplingOps::edit_logits>},
    {"argmax_rows", &has_entry<&OpTables::sampling, &SamplingOps::argmax_rows>},
    {"top_k_rows", &has_entry<&OpTables::sampling, &SamplingOps::top_k_rows>},
};
static_assert(std::size(kOps) == static_cast<size_t>(Op::kCount), "one kOps row per Op");

}  // namespace

const char* op_name(Op op) {
  const auto i = static_cast<size_t>(op);
  return i < std::size(kOps) ? kOps[i].name : "?";
}

bool Backend::has(Op op) const {
  const auto i = static_cast<size_t>(op);
  return i < std::size(kOps) && kOps[i].has(ops_);
}

std::vector<Op> Backend::missing(std::span<const Op> ops) const {
  std::vector<Op> out;
  for (Op op : ops)
    if (!has(op)) out.push_back(op);
  return out;
}

void Backend::require(std::span<const Op> ops, const std::string& what) const {
  const std::vector<Op> lack = missing(ops);
  if (lack.empty()) return;
  std::string names;
  for (Op op : lack) names += (names.empty() ? "" : ", ") + std::string(op_name(op));
  throw Unimplemented(what + " cannot run on " + device_str(device()) + ": this backend has no " +
                      "kernels for " + std::to_string(lack.size()) + " of its " +
                      std::to_string(ops.size()) + " ops (" + names + "); " + describe_backends());
}

namespace detail {
void throw_missing_op(const Backend& be, Op op) {
  throw Unimplemented(std::string(op_name(op)) + " has no kernel on " + device_str(be.device()) +
                      " (this backend lacks the op; nothing falls back to the host)");
}
}  // namespace detail

Tensor Backend::empty(DType dtype, Shape shape) const {
  return tensor(dtype, std::move(shape), /*zero=*/false);
}

Tensor Backend::zeros(DType dtype, Shape shape) const {
  return tensor(dtype, std::move(shape), /*zero=*/true);
}

Tensor Backend::tensor(DType dtype, Shape shape, bool zero) const {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  std::shared_ptr<void> mem = allocate(bytes, zero);
  void* p = mem.get();
  return Tensor::on_device(p, dtype, std::move(shape), std::move(mem), device());
}

void Backend::counted_copy(void* dst, const void* src, size_t bytes, CopyKind kind) const {
  if (bytes == 0) return;
  copy_bytes(dst, src, bytes, kind);
  const auto k = static_cast<size_t>(kind);
  n_[k].fetch_add(1, std::memory_order_relaxed);
  bytes_[k].fetch_add(bytes, std::memory_order_relaxed);
}

void Backend::copy_to_device(void* dst, const void* host_src, size_t bytes) const {
  counted_copy(dst, host_src, bytes, CopyKind::kToDevice);
}

void Backend::copy_to_host(void* host_dst, const void* src, size_t bytes) const {
  counted_copy(host_dst, src, bytes, CopyKind::kToHost);
}

void Backend::copy_on_device(void* dst, const void* src, size_t bytes) const {
  counted_copy(dst, src, bytes, CopyKind::kOnDevice);
}

Tensor Backend::upload(const Tensor& t) const {
  if (t.device() == device()) return t;
  if (!t.on_host())
    throw FailedPrecondition("upload of " + t.describe() + " from " + device_str(t.device()) +
                             " to " + device_str(device()) + ": copy it to the host first");
  const Tensor src = t.contiguous();
  Tensor out = empty(src.dtype(), src.shape());
  copy_to_device(out.raw(), src.raw(), src.nbytes());
  return out;
}

Tensor Backend::to_host(const Tensor& t) const {
  if (t.on_host()) return t;
  if (t.device() != device())
    throw FailedPrecondition("to_host of " + t.describe() + " on " + device_str(t.device()) +
                             " through the " + device_str(device()) + " backend");
  if (!t.is_contiguous())
    throw FailedPrecondition("to_host of a strided " + t.describe() + ": make it contiguous first");
  Tensor out = Tensor::empty(t.dtype(), t.shape());
  copy_to_host(out.raw(), t.raw(), t.nbytes());
  return out;
}

std::unique_ptr<Backend::StepGraph> Backend::capture_step(const std::function<void()>&,
                                                          std::string* why) const {
  if (why) *why = device_str(device()) + " records no step graphs";
  return nullptr;
}

bool Backend::replay_step(const StepGraph&, const std::function<void()>&) const {
  return false;
}

TransferStats Backend::transfers() const {
  auto n = [&](int i) { return n_[i].load(std::memory_order_relaxed); };
  auto b = [&](int i) { return bytes_[i].load(std::memory_order_relaxed); };
  return {.to_device = n(0),
          .to_device_bytes = b(0),
          .to_host = n(1),
          .to_host_bytes = b(1),
          .on_device = n(2),
          .on_device_bytes = b(2)};
}

}  // namespace mmrt::kernels
