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
  const int32_t half = table.head_dim / 2;
  if (table.head_dim <= 0 || table.head_dim % 2 || table.inv_freq.size() != size_t(half) ||
      table.component.size() != size_t(half) || table.n_components < 1)
    throw InvalidArgument("rope_angles: malformed RopeTable (head_dim " +
                          std::to_string(table.head_dim) + ")");
  for (int32_t c : table.component)
    if (c < 0 || c >= table.n_components)
      throw InvalidArgument("rope_angles: RopeTable component " + std::to_string(c) +
                            " outside [0, " + std::to_string(table.n_components) + ")");
  if (n_tokens < 0) throw InvalidArgument("rope_angles: negative token count");
  if (n_tokens > 0 && !pos) throw InvalidArgument("rope_angles: null positions");
  RopeAngles a;
  a.head_dim = table.head_dim;
  a.n_tokens = n_tokens;
  a.cos.resize(static_cast<size_t>(n_tokens * half));
  a.sin.resize(static_cast<size_t>(n_tokens * half));
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* c = a.cos.data() + t * half;  // [half]
      float* s = a.sin.data() + t * half;  // [half]
      for (int32_t j = 0; j < half; ++j) {
        const float p = static_cast<float>(pos[table.component[j] * n_tokens + t]);
        const float ang = p * table.inv_freq[j];
        c[j] = std::cos(ang);
        s[j] = std::sin(ang);
      }
    }
  };
  if (n_tokens * half < kParallelMin)
    body(0, n_tokens);
  else
    be.pool().parallel_for(n_tokens, kParallelMin / half, body);
  return a;
}

void apply_rope(const CpuBackend& be, const RopeAngles& angles, float* x, int64_t n_heads,
                int64_t row_stride, int64_t head_stride) {
  const int64_t hd = angles.head_dim, half = hd / 2, n = angles.n_tokens;
  if (hd <= 0 || hd % 2 || angles.cos.size() != size_t(n * half) ||
      angles.sin.size() != size_t(n * half))
    throw InvalidArgument("apply_rope: malformed RopeAngles");
  if (n_heads < 1) throw InvalidArgument("apply_rope: n_heads must be >= 1");
  if (head_stride == 0) head_stride = hd;
  if (head_stride < hd)
    throw InvalidArgument("apply_rope: head_stride " + std::to_string(head_stride) +
                          " smaller than the rotated dims " + std::to_string(hd));
  if (row_stride == 0) row_stride = n_heads * head_stride;
  if (row_stride < n_heads * head_stride)
    throw InvalidArgument("apply_rope: row_stride " + std::to_string(row_stride) +
                          " smaller than n_heads * head_stride " +
                          std::to_string(n_heads * head_stride));
  if (n > 0 && !x) throw InvalidArgument("apply_rope: null input");
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
