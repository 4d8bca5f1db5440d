// Dispatchers of the element-wise ops: the backend's device table, nothing else.
#include "kernels/ops.h"

#include <string>

#include "core/error.h"

namespace mmrt::kernels {

namespace {
const ElementwiseOps* table(const Backend& be) {
  return be.ops().elementwise;
}
}  // namespace

using detail::entry;

void rms_norm(const Backend& be, const float* x, const Tensor& weight, float eps, float* y,
              int64_t n, int64_t d) {
  entry(be, table(be), &ElementwiseOps::rms_norm, Op::kRmsNorm)(be, x, weight, eps, y, n, d);
}

void layer_norm(const Backend& be, const float* x, const Tensor& weight, const Tensor& bias,
                float eps, float* y, int64_t n, int64_t d) {
  entry(be, table(be), &ElementwiseOps::layer_norm, Op::kLayerNorm)(be, x, weight, bias, eps, y, n,
                                                                    d);
}

void layer_norm_heads(const Backend& be, float* x, int64_t n, int64_t stride, int64_t n_heads,
                      int64_t d, const Tensor& weight, const Tensor& bias, float eps) {
  entry(be, table(be), &ElementwiseOps::layer_norm_heads, Op::kLayerNormHeads)(
      be, x, n, stride, n_heads, d, weight, bias, eps);
}

void add(const Backend& be, float* acc, const float* x, int64_t n) {
  entry(be, table(be), &ElementwiseOps::add, Op::kAdd)(be, acc, x, n);
}

void silu_mul(const Backend& be, const float* gate, const float* up, float* out, int64_t n,
              int64_t inter, int64_t in_stride) {
  entry(be, table(be), &ElementwiseOps::silu_mul, Op::kSiluMul)(be, gate, up, out, n, inter,
                                                                in_stride);
}

void silu_mul_fused(const Backend& be, const float* gate_up, float* out, int64_t n, int64_t inter) {
  if (n > 0 && !gate_up) throw InvalidArgument("silu_mul_fused: null input");
  silu_mul(be, gate_up, gate_up ? gate_up + inter : nullptr, out, n, inter, 2 * inter);
}

void gelu_erf(const Backend& be, const float* x, float* y, int64_t n) {
  entry(be, table(be), &ElementwiseOps::gelu_erf, Op::kGeluErf)(be, x, y, n);
}

void quick_gelu(const Backend& be, const float* x, float* y, int64_t n) {
  entry(be, table(be), &ElementwiseOps::quick_gelu, Op::kQuickGelu)(be, x, y, n);
}

void relu_squared(const Backend& be, const float* x, float* y, int64_t n) {
  entry(be, table(be), &ElementwiseOps::relu_squared, Op::kReluSquared)(be, x, y, n);
}

void softmax(const Backend& be, const float* x, float* y, int64_t n, int64_t d) {
  entry(be, table(be), &ElementwiseOps::softmax, Op::kSoftmax)(be, x, y, n, d);
}

void embedding(const Backend& be, const Tensor& table_, const int32_t* ids, int64_t n, float* out) {
  entry(be, table(be), &ElementwiseOps::embedding, Op::kEmbedding)(be, table_, ids, n, out);
}

}  // namespace mmrt::kernels
