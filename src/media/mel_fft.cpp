// The FFT plan of the log-mel kernels: factorisation and twiddle tables (see mel_internal.h).
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "media/mel_internal.h"

namespace mmrt::media::detail {

FftPlan make_fft_plan(int32_t n) {
  MMRT_CHECK(n >= 1, "FFT length must be positive");
  FftPlan plan;
  plan.n = n;
  std::vector<int32_t> radices;
  int32_t rest = n;
  for (int32_t p : {8, 4, 2, 3, 5})
    while (rest % p == 0) radices.push_back(p), rest /= p;
  for (int32_t p = 7; rest > 1; p += 2)
    while (rest % p == 0) radices.push_back(p), rest /= p, plan.max_generic_radix = p;
  int32_t l = n, s = 1;
  for (int32_t p : radices) {
    FftStage st;
    st.p = p;
    st.m = l / p;
    st.s = s;
    st.tw_offset = static_cast<int64_t>(plan.tw_re.size());
    // W_l^(j*k) = exp(-2 pi i (j*k mod l) / l): the angle reduced first, then one cos and sin.
    for (int32_t j = 0; j < st.m; ++j)
      for (int32_t k = 1; k < p; ++k) {
        const int64_t r = (static_cast<int64_t>(j) * k) % l;
        const double a = 2.0 * std::numbers::pi * static_cast<double>(r) / l;
        plan.tw_re.push_back(std::cos(a));
        plan.tw_im.push_back(-std::sin(a));
      }
    if (p > 5) {
      st.root_offset = static_cast<int64_t>(plan.root_re.size());
      for (int32_t t = 0; t < p; ++t) {
        const double a = 2.0 * std::numbers::pi * static_cast<double>(t) / p;
        plan.root_re.push_back(std::cos(a));
        plan.root_im.push_back(-std::sin(a));
      }
    }
    plan.stages.push_back(st);
    l = st.m;
    s *= p;
  }
  return plan;
}

}  // namespace mmrt::media::detail
