// The device-independent half of every backend: counted copies, tensors of device memory, the
// op list and the missing-op errors.
#include "kernels/backend.h"

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/kv_cache.h"
#include "kernels/layout.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "kernels/registry.h"
#include "kernels/rope.h"

namespace mmrt::kernels {

const char* op_name(Op op) {
  switch (op) {
    case Op::kRmsNorm:
      return "rms_norm";
    case Op::kLayerNorm:
      return "layer_norm";
    case Op::kLayerNormHeads:
      return "layer_norm_heads";
    case Op::kAdd:
      return "add";
    case Op::kSiluMul:
      return "silu_mul";
    case Op::kGeluErf:
      return "gelu_erf";
    case Op::kQuickGelu:
      return "quick_gelu";
    case Op::kReluSquared:
      return "relu_squared";
    case Op::kSoftmax:
      return "softmax";
    case Op::kEmbedding:
      return "embedding";
    case Op::kLinear:
      return "linear";
    case Op::kRopeAngles:
      return "rope_angles";
    case Op::kApplyRope:
      return "apply_rope";
    case Op::kPagedAttention:
      return "paged_attention";
    case Op::kVarlenAttention:
      return "varlen_attention";
    case Op::kKvWrite:
      return "kv_write";
    case Op::kKvRead:
      return "kv_read";
    case Op::kCopy2d:
      return "copy2d";
    case Op::kIm2col1d:
      return "im2col_1d";
    case Op::kPatchify2d:
      return "patchify_2d";
    case Op::kCount:
      break;
  }
  return "?";
}

// The one map from an op to its table entry.
bool Backend::has(Op op) const {
  const OpTables& t = ops_;
  auto in = [](const auto* table, auto member) { return table && table->*member != nullptr; };
  switch (op) {
    case Op::kRmsNorm:
      return in(t.elementwise, &ElementwiseOps::rms_norm);
    case Op::kLayerNorm:
      return in(t.elementwise, &ElementwiseOps::layer_norm);
    case Op::kLayerNormHeads:
      return in(t.elementwise, &ElementwiseOps::layer_norm_heads);
    case Op::kAdd:
      return in(t.elementwise, &ElementwiseOps::add);
    case Op::kSiluMul:
      return in(t.elementwise, &ElementwiseOps::silu_mul);
    case Op::kGeluErf:
      return in(t.elementwise, &ElementwiseOps::gelu_erf);
    case Op::kQuickGelu:
      return in(t.elementwise, &ElementwiseOps::quick_gelu);
    case Op::kReluSquared:
      return in(t.elementwise, &ElementwiseOps::relu_squared);
    case Op::kSoftmax:
      return in(t.elementwise, &ElementwiseOps::softmax);
    case Op::kEmbedding:
      return in(t.elementwise, &ElementwiseOps::embedding);
    case Op::kLinear:
      return in(t.linear, &LinearOps::linear);
    case Op::kRopeAngles:
      return in(t.rope, &RopeOps::rope_angles);
    case Op::kApplyRope:
      return in(t.rope, &RopeOps::apply_rope);
    case Op::kPagedAttention:
      return in(t.attention, &AttentionOps::paged_attention);
    case Op::kVarlenAttention:
      return in(t.attention, &AttentionOps::varlen_attention);
    case Op::kKvWrite:
      return in(t.kv, &KvOps::write);
    case Op::kKvRead:
      return in(t.kv, &KvOps::read);
    case Op::kCopy2d:
      return in(t.layout, &LayoutOps::copy2d);
    case Op::kIm2col1d:
      return in(t.layout, &LayoutOps::im2col_1d);
    case Op::kPatchify2d:
      return in(t.layout, &LayoutOps::patchify_2d);
    case Op::kCount:
      break;
  }
  return false;
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
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  std::shared_ptr<void> mem = allocate(bytes);
  void* p = mem.get();
  return Tensor::on_device(p, dtype, std::move(shape), std::move(mem), device());
}

Tensor Backend::zeros(DType dtype, Shape shape) const {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  std::shared_ptr<void> mem = allocate(bytes, /*zero=*/true);
  void* p = mem.get();
  return Tensor::on_device(p, dtype, std::move(shape), std::move(mem), device());
}

void Backend::copy_to_device(void* dst, const void* host_src, size_t bytes) const {
  if (bytes == 0) return;
  copy_bytes(dst, host_src, bytes, CopyKind::kToDevice);
  n_[0].fetch_add(1, std::memory_order_relaxed);
  bytes_[0].fetch_add(bytes, std::memory_order_relaxed);
}

void Backend::copy_to_host(void* host_dst, const void* src, size_t bytes) const {
  if (bytes == 0) return;
  copy_bytes(host_dst, src, bytes, CopyKind::kToHost);
  n_[1].fetch_add(1, std::memory_order_relaxed);
  bytes_[1].fetch_add(bytes, std::memory_order_relaxed);
}

void Backend::copy_on_device(void* dst, const void* src, size_t bytes) const {
  if (bytes == 0) return;
  copy_bytes(dst, src, bytes, CopyKind::kOnDevice);
  n_[2].fetch_add(1, std::memory_order_relaxed);
  bytes_[2].fetch_add(bytes, std::memory_order_relaxed);
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
