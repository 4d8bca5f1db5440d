// AVX2 instantiation of the attention inner kernel (compiled with AVX2 flags; only
// called after the run-time CPU check in attention.cpp).
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/attention_kernel.h"

namespace mmrt::kernels::detail {

const AttnFns& attn_fns_avx2() {
  static const AttnFns f = simd::make_attn_fns<simd::Vec256>("avx2");
  return f;
}

}  // namespace mmrt::kernels::detail
