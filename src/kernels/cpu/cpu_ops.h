// Internal: the CPU backend's op kernels, one per op table entry (arguments as in the public
// op headers; validated here). cpu_backend.cpp puts them in the CPU's op tables.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/attention.h"
#include "kernels/kv_cache.h"
#include "kernels/layout.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"

namespace mmrt::kernels {
class CpuBackend;
}

namespace mmrt::kernels::cpu {

// ops_cpu.cpp
void rms_norm(const CpuBackend& be, const float* x, const Tensor& weight, float eps, float* y,
              int64_t n, int64_t d);
void layer_norm(const CpuBackend& be, const float* x, const Tensor& weight, const Tensor& bias,
                float eps, float* y, int64_t n, int64_t d);
void layer_norm_heads(const CpuBackend& be, float* x, int64_t n, int64_t stride, int64_t n_heads,
                      int64_t d, const Tensor& weight, const Tensor& bias, float eps);
void add(const CpuBackend& be, float* acc, const float* x, int64_t n);
void silu_mul(const CpuBackend& be, const float* gate, const float* up, float* out, int64_t n,
              int64_t inter, int64_t in_stride);
void gelu_erf(const CpuBackend& be, const float* x, float* y, int64_t n);
void quick_gelu(const CpuBackend& be, const float* x, float* y, int64_t n);
void relu_squared(const CpuBackend& be, const float* x, float* y, int64_t n);
void softmax(const CpuBackend& be, const float* x, float* y, int64_t n, int64_t d);
void embedding(const CpuBackend& be, const Tensor& table, const int32_t* ids, int64_t n,
               float* out);

// linear_cpu.cpp
PackedLinear pack_linear(const CpuBackend& be, std::span<const Tensor* const> ws,
                         std::span<const Tensor* const> biases, WeightFormat fmt,
                         WeightPlacement place);
void linear(const CpuBackend& be, const float* x, int64_t n, const PackedLinear& w, float* y,
            const LinearOptions& opt);
LinearPlan linear_plan(const CpuBackend& be, int64_t n, const PackedLinear& w,
                       const LinearOptions& opt);

// rope_cpu.cpp
RopeAngles rope_angles(const CpuBackend& be, const RopeTable& table, const int32_t* pos,
                       int64_t n_tokens);
void apply_rope(const CpuBackend& be, const RopeAngles& angles, float* x, int64_t n_heads,
                int64_t row_stride, int64_t head_stride);

// attention_cpu.cpp
void paged_attention(const CpuBackend& be, const PagedAttentionArgs& args, const KvLayerView& kv,
                     std::span<const AttnSeq> seqs);
void varlen_attention(const CpuBackend& be, const VarlenAttentionArgs& args);
bool varlen_int8_scores(const CpuBackend& be);

// kv_cpu.cpp
void kv_write(const CpuBackend& be, const KvLayerView& layer, const float* k, const float* v,
              const int32_t* slots, int64_t n, int64_t k_stride, int64_t v_stride);
void kv_read(const CpuBackend& be, const KvLayerView& layer, const int32_t* slots, int64_t n,
             float* k, float* v);

// layout_cpu.cpp
void copy2d(const CpuBackend& be, float* dst, int64_t dst_stride, const float* src,
            int64_t src_stride, int64_t rows, int64_t cols);
void im2col_1d(const CpuBackend& be, const float* x, const Im2col1d& shape, float* cols);
void patchify_2d(const CpuBackend& be, const float* images, int64_t n, int64_t channels,
                 int64_t size, int64_t patch, float* rows);
void to_f16(const CpuBackend& be, const float* x, uint16_t* y, int64_t n);
void from_f16(const CpuBackend& be, const uint16_t* x, float* y, int64_t n);

// sampling_cpu.cpp
void edit_logits(const CpuBackend& be, float* x, int64_t stride, std::span<const LogitEdit> edits);
void argmax_rows(const CpuBackend& be, const float* x, int64_t stride, int64_t vocab,
                 std::span<const int32_t> rows, int32_t* out);
void top_k_rows(const CpuBackend& be, const float* x, int64_t stride, int64_t vocab,
                std::span<const TopKRow> rows, std::pair<float, int32_t>* out);

}  // namespace mmrt::kernels::cpu
