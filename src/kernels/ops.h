// Element-wise ops on f32 activations (rows are tokens), matching the Hugging Face PyTorch
// definitions in fp32. Each call runs the backend's ElementwiseOps entry (its device's kernel);
// the CPU backend's are vectorised with run-time ISA selection (AVX-512 / AVX2 / portable, its
// Backend cap) and split rows over its pool when the work is large enough. Activations are
// memory of the backend's device; weights are tensors on it (Backend::upload). Input and output
// may alias (in-place) unless noted.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/backend.h"

namespace mmrt::kernels {

// HF RMSNorm: y = weight * (x * rsqrt(mean(x^2) + eps)). x, y: [n, d]; weight: f32|bf16 [d].
void rms_norm(const Backend& be, const float* x, const Tensor& weight, float eps, float* y,
              int64_t n, int64_t d);

// LayerNorm over the last dim (biased variance): y = (x - mean) / sqrt(var + eps) * w + b.
// x, y: [n, d]; weight, bias: f32|bf16 [d].
void layer_norm(const Backend& be, const float* x, const Tensor& weight, const Tensor& bias,
                float eps, float* y, int64_t n, int64_t d);

// The same LayerNorm on every head, in place: row t of x (rows `stride` floats apart) starts with
// n_heads heads of d floats (the q or the k block of a fused q|k|v projection); weight and bias
// [d] are shared by all heads (Persimmon's q/k LayerNorm). One pass over all n * n_heads heads.
void layer_norm_heads(const Backend& be, float* x, int64_t n, int64_t stride, int64_t n_heads,
                      int64_t d, const Tensor& weight, const Tensor& bias, float eps);

// acc[i] += x[i] for i < n (residual add).
void add(const Backend& be, float* acc, const float* x, int64_t n);

// SwiGLU: out[r, i] = silu(gate[r, i]) * up[r, i] for r < n, i < inter. Input rows are
// `in_stride` floats apart (0 means inter); out: [n, inter]. out may alias gate.
void silu_mul(const Backend& be, const float* gate, const float* up, float* out, int64_t n,
              int64_t inter, int64_t in_stride = 0);
// Fused form: gate_up [n, 2*inter] holds gate in the first half of each row, up in the second.
void silu_mul_fused(const Backend& be, const float* gate_up, float* out, int64_t n, int64_t inter);

// Exact GELU: x/2 * (1 + erf(x / sqrt(2))), over n elements.
void gelu_erf(const Backend& be, const float* x, float* y, int64_t n);
// quick_gelu (CLIP / Qwen2-VL vision MLP): x * sigmoid(1.702 x).
void quick_gelu(const Backend& be, const float* x, float* y, int64_t n);

// Squared ReLU (Persimmon's "relu2" MLP): y = max(x, 0)², over n elements.
void relu_squared(const Backend& be, const float* x, float* y, int64_t n);
// Softmax over each row of x: [n, d] (fp32, max-subtracted).
void softmax(const Backend& be, const float* x, float* y, int64_t n, int64_t d);

// Embedding lookup: out[i, :] = table[ids[i], :] as f32. table: f32|bf16|f16 [vocab, d] on the
// device; ids: host [n]; out: [n, d]. Throws InvalidArgument for an id outside [0, vocab).
void embedding(const Backend& be, const Tensor& table, const int32_t* ids, int64_t n, float* out);

// Index of the largest of x[0..n) in host memory (the first one on ties; a NaN counts as
// largest, as in torch.argmax). Throws InvalidArgument when n < 1. The best variant of the
// CPU; every variant gives the same index.
int64_t argmax(const float* x, int64_t n);

// Which CPU kernels the ops above use at most `cap`: "avx512", "avx2" or "scalar".
const char* ops_isa(Isa cap);

// A device's element-wise kernels (arguments as above; silu_mul_fused is silu_mul's).
struct ElementwiseOps {
  void (*rms_norm)(const Backend&, const float* x, const Tensor& weight, float eps, float* y,
                   int64_t n, int64_t d);
  void (*layer_norm)(const Backend&, const float* x, const Tensor& weight, const Tensor& bias,
                     float eps, float* y, int64_t n, int64_t d);
  void (*layer_norm_heads)(const Backend&, float* x, int64_t n, int64_t stride, int64_t n_heads,
                           int64_t d, const Tensor& weight, const Tensor& bias, float eps);
  void (*add)(const Backend&, float* acc, const float* x, int64_t n);
  void (*silu_mul)(const Backend&, const float* gate, const float* up, float* out, int64_t n,
                   int64_t inter, int64_t in_stride);
  void (*gelu_erf)(const Backend&, const float* x, float* y, int64_t n);
  void (*quick_gelu)(const Backend&, const float* x, float* y, int64_t n);
  void (*relu_squared)(const Backend&, const float* x, float* y, int64_t n);
  void (*softmax)(const Backend&, const float* x, float* y, int64_t n, int64_t d);
  void (*embedding)(const Backend&, const Tensor& table, const int32_t* ids, int64_t n, float* out);
};

}  // namespace mmrt::kernels
