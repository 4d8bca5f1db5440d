// The AVX2 log-mel kernel: 4 frames a vector (see mel_kernel_impl.h).
#include "media/mel_kernel_impl.h"

namespace mmrt::media::detail {
namespace {

typedef double V4 __attribute__((vector_size(32)));
typedef uint64_t U4 __attribute__((vector_size(32)));
typedef float F4 __attribute__((vector_size(16)));

const MelKernels kAvx2{"avx2", 4, &log_mel_frames<V4, U4, F4>, &finish<V4, F4>};

}  // namespace

const MelKernels& avx2_mel_kernels() {
  return kAvx2;
}

}  // namespace mmrt::media::detail
