// AVX512 instantiation of the attention inner kernel (compiled with AVX512 flags; only
// called after the run-time CPU check in attention.cpp).
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/attention_kernel.h"

namespace mmrt::kernels::detail {

const AttnFns& attn_fns_avx512() {
  static const AttnFns f = simd::make_attn_fns<simd::Vec512>("avx512");
  return f;
}

}  // namespace mmrt::kernels::detail
