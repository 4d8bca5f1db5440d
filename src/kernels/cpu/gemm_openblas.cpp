// OpenBLAS back end (f32 only). Debian's libopenblas0-pthread starts its own threads unless told
// otherwise; we set it to one thread once, and call it from our pool threads (OpenBLAS is safe to
// call concurrently), so every core stays under the ThreadPool's control.
#include <cblas.h>

#include "kernels/cpu/linear_impl.h"

namespace mmrt::kernels::detail {

namespace {
// The library's own setting, made once (thread-safe static initialisation).
void openblas_single_thread() {
  static const bool set = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)set;
}
}  // namespace

void openblas_sgemm(const float* x, int64_t m, int64_t k, const float* w, int64_t n, int64_t ldw,
                    float* y, int64_t ldy) {
  openblas_single_thread();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, x, static_cast<blasint>(k), w,
              static_cast<blasint>(ldw), 0.0f, y, static_cast<blasint>(ldy));
}

}  // namespace mmrt::kernels::detail
