// The AVX512 log-mel kernel: 8 frames a vector (see mel_kernel_impl.h).
#include "media/mel_kernel_impl.h"

namespace mmrt::media::detail {
namespace {

typedef double V8 __attribute__((vector_size(64)));
typedef uint64_t U8 __attribute__((vector_size(64)));
typedef float F8 __attribute__((vector_size(32)));

const MelKernels kAvx512{"avx512", 8, &log_mel_frames<V8, U8, F8>, &finish<V8, F8>};

}  // namespace

const MelKernels& avx512_mel_kernels() {
  return kAvx512;
}

}  // namespace mmrt::media::detail
