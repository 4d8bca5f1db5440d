// The CPU backend's rotary kernels: angles and the rotation, with run-time ISA selection.
#include "kernels/cpu/cpu_ops.h"
#include "kernels/rope.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/ops_impl.h"
#include "kernels/cpu/ops_kernels.h"

namespace mmrt::kernels {

namespace detail {
const RopeFns& rope_fns_scalar() {
  static const RopeFns f = simd::make_rope_fns<simd::VecScalar>("scalar");
  return f;
}
}  // namespace detail

namespace {

const detail::RopeFns& rope_fns(Isa cap) {
  static const IsaVariants<detail::RopeFns> v{{Isa::kAvx512, detail::rope_fns_avx512},
                                              {Isa::kAvx2, detail::rope_fns_avx2},
                                              {Isa::kPortable, detail::rope_fns_scalar}};
  return v.at_most(cap);
}

constexpr int64_t kParallelMin = 1 << 14;  // elements of work before threads are used

}  // namespace

namespace cpu {

RopeAngles rope_angles(const CpuBackend& be, const RopeTable& table, const int32_t* pos,
                       int64_t n_tokens) {
  RopeAngles a = detail::sized_rope_angles(table, n_tokens);
  const int64_t half = table.head_dim / 2;
  auto body = [&](int64_t b, int64_t e) { detail::rope_angle_rows(table, pos, n_tokens, b, e, a); };
  if (n_tokens * half < kParallelMin)
    body(0, n_tokens);
  else
    be.pool().parallel_for(n_tokens, kParallelMin / half, body);
  return a;
}

void apply_rope(const CpuBackend& be, const RopeAngles& angles, float* x, int64_t n_heads,
                int64_t row_stride, int64_t head_stride) {
  const int64_t hd = angles.head_dim, half = hd / 2, n = angles.n_tokens;
  const auto& f = rope_fns(be.isa());
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      f.rotate_row(x + t * row_stride, n_heads, head_stride, hd, angles.cos.data() + t * half,
                   angles.sin.data() + t * half);
  };
  const int64_t per_token = n_heads * hd;
  if (n * per_token < kParallelMin)
    body(0, n);
  else
    be.pool().parallel_for(n, std::max<int64_t>(1, kParallelMin / per_token), body);
}

}  // namespace cpu

const char* rope_isa(Isa cap) {
  return rope_fns(cap).isa;
}

}  // namespace mmrt::kernels
