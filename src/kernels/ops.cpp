// Dispatchers of the element-wise ops: the backend's device table (a device without the op is
// told so first), the arguments checked once for every device, and no call for zero rows.
#include "kernels/ops.h"

#include <string>

#include "core/error.h"

namespace mmrt::kernels {

namespace {
const ElementwiseOps* table(const Backend& be) {
  return be.ops().elementwise;
}

void check_rows(const char* op, const void* x, const void* y, int64_t n, int64_t d) {
  if (n < 0 || d < 1)
    throw InvalidArgument(std::string(op) + ": bad shape [" + std::to_string(n) + ", " +
                          std::to_string(d) + "]");
  if (n > 0 && (!x || !y)) throw InvalidArgument(std::string(op) + ": null data pointer");
}

// A tensor the op reads must be the backend's memory (a checkpoint tensor on the host is not a
// GPU's: Backend::upload it).
void check_device(const Backend& be, const char* op, const char* what, const Tensor& t) {
  if (t.device() != be.device())
    throw InvalidArgument(std::string(op) + ": " + what + " is memory of " +
                          device_str(t.device()) + ", the backend computes on " +
                          device_str(be.device()) + " (upload it)");
}

// Weights, biases and embedding tables are stored f32, bf16 or f16.
void check_float(const char* op, const char* what, const Tensor& t) {
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16 && t.dtype() != DType::kF16)
    throw InvalidArgument(std::string(op) + ": " + what + " must be f32, bf16 or f16, got " +
                          t.describe());
}

// A [d] parameter vector (weight, bias): contiguous f32, bf16 or f16, on the backend's device.
void check_param(const Backend& be, const char* op, const char* what, const Tensor& t, int64_t d) {
  check_device(be, op, what, t);
  if (t.rank() != 1 || t.dim(0) != d || !t.is_contiguous())
    throw InvalidArgument(std::string(op) + ": " + what + " must be a contiguous [" +
                          std::to_string(d) + "] tensor, got " + t.describe());
  check_float(op, what, t);
}
}  // namespace

using detail::entry;

void rms_norm(const Backend& be, const float* x, const Tensor& weight, float eps, float* y,
              int64_t n, int64_t d) {
  const auto fn = entry(be, table(be), &ElementwiseOps::rms_norm, Op::kRmsNorm);
  check_rows("rms_norm", x, y, n, d);
  check_param(be, "rms_norm", "weight", weight, d);
  if (n == 0) return;  // nothing for the device to do
  fn(be, x, weight, eps, y, n, d);
}

void layer_norm(const Backend& be, const float* x, const Tensor& weight, const Tensor& bias,
                float eps, float* y, int64_t n, int64_t d) {
  const auto fn = entry(be, table(be), &ElementwiseOps::layer_norm, Op::kLayerNorm);
  check_rows("layer_norm", x, y, n, d);
  check_param(be, "layer_norm", "weight", weight, d);
  check_param(be, "layer_norm", "bias", bias, d);
  if (n == 0) return;  // nothing for the device to do
  fn(be, x, weight, bias, eps, y, n, d);
}

void layer_norm_heads(const Backend& be, float* x, int64_t n, int64_t stride, int64_t n_heads,
                      int64_t d, const Tensor& weight, const Tensor& bias, float eps) {
  const auto fn = entry(be, table(be), &ElementwiseOps::layer_norm_heads, Op::kLayerNormHeads);
  check_rows("layer_norm_heads", x, x, n * n_heads, d);
  if (n_heads < 1 || stride < n_heads * d)
    throw InvalidArgument("layer_norm_heads: " + std::to_string(n_heads) + " heads of " +
                          std::to_string(d) + " do not fit a row stride of " +
                          std::to_string(stride));
  check_param(be, "layer_norm_heads", "weight", weight, d);
  check_param(be, "layer_norm_heads", "bias", bias, d);
  if (n == 0) return;  // nothing for the device to do
  fn(be, x, n, stride, n_heads, d, weight, bias, eps);
}

void add(const Backend& be, float* acc, const float* x, int64_t n) {
  const auto fn = entry(be, table(be), &ElementwiseOps::add, Op::kAdd);
  check_rows("add", acc, x, n, 1);
  if (n == 0) return;  // nothing for the device to do
  fn(be, acc, x, n);
}

void silu_mul(const Backend& be, const float* gate, const float* up, float* out, int64_t n,
              int64_t inter, int64_t in_stride) {
  const auto fn = entry(be, table(be), &ElementwiseOps::silu_mul, Op::kSiluMul);
  check_rows("silu_mul", gate, out, n, inter);
  if (n > 0 && !up) throw InvalidArgument("silu_mul: null up pointer");
  if (in_stride == 0) in_stride = inter;
  if (in_stride < inter)
    throw InvalidArgument("silu_mul: in_stride " + std::to_string(in_stride) + " < inter " +
                          std::to_string(inter));
  if (n == 0) return;  // nothing for the device to do
  fn(be, gate, up, out, n, inter, in_stride);
}

void silu_mul_fused(const Backend& be, const float* gate_up, float* out, int64_t n, int64_t inter) {
  if (n > 0 && !gate_up) throw InvalidArgument("silu_mul_fused: null input");
  silu_mul(be, gate_up, gate_up ? gate_up + inter : nullptr, out, n, inter, 2 * inter);
}

void gelu_erf(const Backend& be, const float* x, float* y, int64_t n) {
  const auto fn = entry(be, table(be), &ElementwiseOps::gelu_erf, Op::kGeluErf);
  check_rows("gelu_erf", x, y, n, 1);
  if (n == 0) return;  // nothing for the device to do
  fn(be, x, y, n);
}

void quick_gelu(const Backend& be, const float* x, float* y, int64_t n) {
  const auto fn = entry(be, table(be), &ElementwiseOps::quick_gelu, Op::kQuickGelu);
  check_rows("quick_gelu", x, y, n, 1);
  if (n == 0) return;  // nothing for the device to do
  fn(be, x, y, n);
}

void relu_squared(const Backend& be, const float* x, float* y, int64_t n) {
  const auto fn = entry(be, table(be), &ElementwiseOps::relu_squared, Op::kReluSquared);
  check_rows("relu_squared", x, y, n, 1);
  if (n == 0) return;  // nothing for the device to do
  fn(be, x, y, n);
}

void softmax(const Backend& be, const float* x, float* y, int64_t n, int64_t d) {
  const auto fn = entry(be, table(be), &ElementwiseOps::softmax, Op::kSoftmax);
  check_rows("softmax", x, y, n, d);
  if (n == 0) return;  // nothing for the device to do
  fn(be, x, y, n, d);
}

void embedding(const Backend& be, const Tensor& table_, const int32_t* ids, int64_t n, float* out) {
  const auto fn = entry(be, table(be), &ElementwiseOps::embedding, Op::kEmbedding);
  if (table_.rank() != 2 || !table_.is_contiguous())
    throw InvalidArgument("embedding: table must be a contiguous [vocab, d] tensor, got " +
                          table_.describe());
  check_device(be, "embedding", "the table", table_);
  check_float("embedding", "table", table_);
  if (n < 0) throw InvalidArgument("embedding: negative token count");
  if (n > 0 && (!ids || !out)) throw InvalidArgument("embedding: null pointer");
  const int64_t vocab = table_.dim(0);
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw InvalidArgument("embedding: token id " + std::to_string(ids[i]) + " at index " +
                            std::to_string(i) + " is outside the vocabulary [0, " +
                            std::to_string(vocab) + ")");
  if (n == 0) return;  // nothing for the device to do
  fn(be, table_, ids, n, out);
}

}  // namespace mmrt::kernels
