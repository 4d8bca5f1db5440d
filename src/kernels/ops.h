// Element-wise CPU kernels on f32 activations (rows are tokens), matching the Hugging Face
// PyTorch definitions in fp32. Vectorised with run-time ISA selection (AVX-512 / AVX2 / portable).
//
// Row-wise ops are parallelised over rows with `pool` when the work is large enough; pass
// nullptr to use ThreadPool::global(). Input and output may alias (in-place) unless noted.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace mmrt::kernels {

// HF RMSNorm: y = weight * (x * rsqrt(mean(x^2) + eps)). x, y: [n, d]; weight: f32|bf16 [d].
void rms_norm(const float* x, const Tensor& weight, float eps, float* y, int64_t n, int64_t d,
              ThreadPool* pool = nullptr);

// LayerNorm over the last dim (biased variance): y = (x - mean) / sqrt(var + eps) * w + b.
// x, y: [n, d]; weight, bias: f32|bf16 [d].
void layer_norm(const float* x, const Tensor& weight, const Tensor& bias, float eps, float* y,
                int64_t n, int64_t d, ThreadPool* pool = nullptr);

// acc[i] += x[i] for i < n (residual add).
void add(float* acc, const float* x, int64_t n, ThreadPool* pool = nullptr);

// SwiGLU: out[r, i] = silu(gate[r, i]) * up[r, i] for r < n, i < inter. Input rows are
// `in_stride` floats apart (0 means inter); out: [n, inter]. out may alias gate.
void silu_mul(const float* gate, const float* up, float* out, int64_t n, int64_t inter,
              int64_t in_stride = 0, ThreadPool* pool = nullptr);
// Fused form: gate_up [n, 2*inter] holds gate in the first half of each row, up in the second.
void silu_mul_fused(const float* gate_up, float* out, int64_t n, int64_t inter,
                    ThreadPool* pool = nullptr);

// Exact GELU: x/2 * (1 + erf(x / sqrt(2))), over n elements.
void gelu_erf(const float* x, float* y, int64_t n, ThreadPool* pool = nullptr);
// quick_gelu (CLIP / Qwen2-VL vision MLP): x * sigmoid(1.702 x).
void quick_gelu(const float* x, float* y, int64_t n, ThreadPool* pool = nullptr);

// Softmax over each row of x: [n, d] (fp32, max-subtracted).
void softmax(const float* x, float* y, int64_t n, int64_t d, ThreadPool* pool = nullptr);

// Embedding lookup: out[i, :] = table[ids[i], :] as f32. table: f32|bf16|f16 [vocab, d];
// out: [n, d]. Throws InvalidArgument for an id outside [0, vocab).
void embedding(const Tensor& table, const int32_t* ids, int64_t n, float* out);

// Index of the largest of x[0..n) (the first one on ties; a NaN counts as largest, as in
// torch.argmax). Throws InvalidArgument when n < 1.
int64_t argmax(const float* x, int64_t n);

// Which implementation the kernels above use: "avx512", "avx2" or "scalar".
const char* ops_isa();
// Test hook: force a variant; returns false (and changes nothing) if this CPU lacks it.
bool ops_force_isa(const char* isa);

}  // namespace mmrt::kernels
