// The CUDA backend's rotary kernels (kernels/rope.h; the dispatcher checked the arguments). The
// angles are host step metadata, computed on the host as every device does; the rotation uploads
// the step's cos and sin once per call and rotates one pair per thread, products rounded
// separately (no fused multiply-add) as the CPU kernels round them.
#include "kernels/cuda/cuda_internal.h"
#include "kernels/rope.h"

namespace mmrt::kernels::cuda {

namespace {

__global__ void rope_kernel(float* x, const float* cos, const float* sin, int64_t n,
                            int64_t n_heads, int64_t row_stride, int64_t head_stride,
                            int64_t half) {
  MMRT_CUDA_FOR(i, n * n_heads * half) {
    const int64_t t = i / (n_heads * half), h = (i / half) % n_heads, j = i % half;
    float* x1 = x + t * row_stride + h * head_stride + j;
    float* x2 = x1 + half;
    const float a = *x1, b = *x2, c = cos[t * half + j], s = sin[t * half + j];
    *x1 = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    *x2 = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  }
}

RopeAngles rope_angles(const Backend&, const RopeTable& table, const int32_t* pos,
                       int64_t n_tokens) {
  RopeAngles a = detail::sized_rope_angles(table, n_tokens);
  detail::rope_angle_rows(table, pos, n_tokens, 0, n_tokens, a);
  return a;
}

void apply_rope(const Backend& be, const RopeAngles& angles, float* x, int64_t n_heads,
                int64_t row_stride, int64_t head_stride) {
  const int64_t n = angles.n_tokens, half = angles.head_dim / 2;
  const size_t bytes = angles.cos.size() * sizeof(float);
  const auto* cos = static_cast<const float*>(upload_scratch(be, 1, angles.cos.data(), bytes));
  const auto* sin = static_cast<const float*>(upload_scratch(be, 2, angles.sin.data(), bytes));
  launch(be, "apply_rope", rope_kernel, flat_blocks(n * n_heads * half), kFlatThreads, 0, x, cos,
         sin, n, n_heads, row_stride, head_stride, half);
}

}  // namespace

const RopeOps kRope{.rope_angles = &rope_angles, .apply_rope = &apply_rope};

}  // namespace mmrt::kernels::cuda
