// AVX512 instantiation of the rotary kernel (compiled with AVX512 flags; only called after
// the run-time CPU check in rope.cpp).
#include "kernels/cpu/ops_impl.h"
#include "kernels/cpu/ops_kernels.h"

namespace mmrt::kernels::detail {

const RopeFns& rope_fns_avx512() {
  static const RopeFns f = simd::make_rope_fns<simd::Vec512>("avx512");
  return f;
}

}  // namespace mmrt::kernels::detail
