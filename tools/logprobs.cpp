#include "logprobs.h"

#include <algorithm>
#include <cmath>

namespace mmrt::cli {

std::vector<double> log_softmax(const float* x, int64_t n) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<double>(x[i]) - lse;
  return out;
}

size_t argmax(const std::vector<double>& v) {
  return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

double kl(const std::vector<double>& lp, const std::vector<double>& lq) {
  double s = 0;
  for (size_t i = 0; i < lp.size(); ++i) s += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(0.0, s);
}

}  // namespace mmrt::cli
