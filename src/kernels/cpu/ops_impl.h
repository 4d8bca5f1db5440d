// Internal: the per-ISA function tables of the element-wise and rotary kernels (see ops.cpp,
// rope.cpp). Not a public header.
#pragma once

#include <cstdint>

#include "core/isa.h"

namespace mmrt::kernels::detail {

// Row kernels work on one contiguous row; the dispatchers in ops.cpp validate and parallelise.
struct OpsFns {
  const char* isa;
  void (*rms_norm_row)(const float* x, const float* w, float eps, float* y, int64_t d);
  void (*layer_norm_row)(const float* x, const float* w, const float* b, float eps, float* y,
                         int64_t d);
  void (*add)(float* acc, const float* x, int64_t n);
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);
  void (*gelu_erf)(const float* x, float* y, int64_t n);
  void (*quick_gelu)(const float* x, float* y, int64_t n);
  void (*softmax_row)(const float* x, float* y, int64_t d);
  float (*max)(const float* x, int64_t n);  // n >= 1; NaN if any element is NaN
  // One row of a GEMM tile's epilogue, in one pass over it: v = f32(t - off) * sx * sw + bias
  // (int32 sums of the int8 GEMM) or v = t * sw + bias (f32 sums), then the activation `act`
  // (0 none, 1 quick_gelu, 2 exact GELU: the values of those ops), then y = v, or y += v where
  // `accumulate`. off, sw and bias may be null (none); the f32 t may be y itself.
  void (*gemm_row_i32)(const int32_t* t, const int32_t* off, float sx, const float* sw,
                       const float* bias, int act, bool accumulate, float* y, int64_t n);
  void (*gemm_row_f32)(const float* t, const float* sw, const float* bias, int act, bool accumulate,
                       float* y, int64_t n);
};

const OpsFns& ops_fns_scalar();
const OpsFns& ops_fns_avx2();
const OpsFns& ops_fns_avx512();
// The widest of them the CPU runs at most `cap` (the element-wise ops' own choice).
const OpsFns& ops_fns(Isa cap);

struct RopeFns {
  const char* isa;
  // Rotates every head of one token row: x[h*head_stride + j] pairs with
  // x[h*head_stride + j + rot_dim/2] for j < rot_dim/2 (rot_dim < head_stride: partial rotary).
  void (*rotate_row)(float* x, int64_t n_heads, int64_t head_stride, int64_t rot_dim,
                     const float* cos, const float* sin);
};

const RopeFns& rope_fns_scalar();
const RopeFns& rope_fns_avx2();
const RopeFns& rope_fns_avx512();

}  // namespace mmrt::kernels::detail
