// The portable log-mel kernel (SSE2, the x86-64 baseline: 2 frames a vector) and the run-time
// choice among the ISA variants.
#include "media/mel_kernel_impl.h"

namespace mmrt::media::detail {
namespace {

typedef double V2 __attribute__((vector_size(16)));
typedef uint64_t U2 __attribute__((vector_size(16)));
typedef float F2 __attribute__((vector_size(8)));

const MelKernels kPortable{"portable", 2, &log_mel_frames<V2, U2, F2>, &finish<V2, F2>};

}  // namespace

const MelKernels& portable_mel_kernels() {
  return kPortable;
}

const MelKernels& mel_kernels(Isa cap) {
  static const IsaVariants<MelKernels> v{{Isa::kAvx512, avx512_mel_kernels},
                                         {Isa::kAvx2, avx2_mel_kernels},
                                         {Isa::kPortable, portable_mel_kernels}};
  return v.at_most(cap);
}

}  // namespace mmrt::media::detail
