// AVX2 instantiation of the element-wise kernels (compiled with AVX2 flags; only called
// after the run-time CPU check in ops.cpp).
#include "kernels/cpu/ops_impl.h"
#include "kernels/cpu/ops_kernels.h"

namespace mmrt::kernels::detail {

const OpsFns& ops_fns_avx2() {
  static const OpsFns f = simd::make_ops_fns<simd::Vec256>("avx2");
  return f;
}

}  // namespace mmrt::kernels::detail
