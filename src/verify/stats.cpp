#include "verify/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "obs/report.h"

namespace mmrt::verify {
namespace {

constexpr double kRatio = 1.01;

double log_pmf(int64_t k, int64_t n, double lp, double lq) {
  const double nn = static_cast<double>(n), kk = static_cast<double>(k);
  return std::lgamma(nn + 1) - std::lgamma(kk + 1) - std::lgamma(nn - kk + 1) + kk * lp +
         (nn - kk) * lq;
}

}  // namespace

std::string format_ms(double ms) {
  if (!std::isfinite(ms)) return "—";
  char b[48];
  std::snprintf(b, sizeof b, ms < 100 ? "%.1f ms" : "%.0f ms", ms);
  return b;
}

double round3(double x) {
  return std::round(x * 1000) / 1000;
}

double binomial_cdf(int64_t t, int64_t n, double p) {
  if (t < 0) return 0;
  if (t >= n) return 1;
  if (p <= 0) return 1;
  if (p >= 1) return 0;
  const double lp = std::log(p), lq = std::log1p(-p);
  // Sum the pmf terms from the largest down (log-sum-exp keeps the small tail exact).
  std::vector<double> terms;
  terms.reserve(static_cast<size_t>(t + 1));
  double top = -std::numeric_limits<double>::infinity();
  for (int64_t k = 0; k <= t; ++k) {
    terms.push_back(log_pmf(k, n, lp, lq));
    top = std::max(top, terms.back());
  }
  double s = 0;
  for (double l : terms) s += std::exp(l - top);
  return std::min(1.0, std::exp(top) * s);
}

int64_t min_samples(double q, double confidence, int64_t over) {
  if (!(q > 0 && q < 1) || !(confidence > 0 && confidence < 1) || over < 0)
    throw InvalidArgument("min_samples: quantile and confidence must lie in (0, 1)");
  const double p = 1 - q, alpha = 1 - confidence;
  auto holds = [&](int64_t n) { return binomial_cdf(over, n, p) <= alpha; };
  int64_t hi = std::max<int64_t>(over + 1, 16);
  while (!holds(hi)) hi *= 2;
  int64_t lo = over;  // never holds: every sample over budget
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (holds(mid) ? hi : lo) = mid;
  }
  return hi;
}

int64_t max_over_allowed(int64_t n, double q, double confidence) {
  const double p = 1 - q, alpha = 1 - confidence;
  int64_t t = -1;
  while (t + 1 < n && binomial_cdf(t + 1, n, p) <= alpha) ++t;
  return t;
}

int64_t over_allowed_by_rank(int64_t n, double q) {
  if (n <= 0) return 0;
  // The nearest-rank quantile is the value at rank ceil(q n) (obs::percentile): it stays within
  // budget while at most n - rank values are over. The epsilon keeps q n = 270.0000000001 (0.9
  // of 300 in binary) at rank 270.
  const auto rank =
      std::clamp<int64_t>(static_cast<int64_t>(std::ceil(q * static_cast<double>(n) - 1e-9)), 1, n);
  return n - rank;
}

const char* to_string(ClaimStatus s) {
  switch (s) {
    case ClaimStatus::kPass:
      return "pass";
    case ClaimStatus::kFail:
      return "fail";
    case ClaimStatus::kInsufficient:
      return "insufficient";
  }
  return "?";
}

Claim judge_claim(int64_t samples, int64_t over, double q, double confidence) {
  Claim c{.samples = samples, .over = over, .needed = min_samples(q, confidence, over)};
  const int64_t allowed = over_allowed_by_rank(samples, q);
  if (over > allowed)
    c.status = ClaimStatus::kFail;
  else
    c.status = samples >= c.needed ? ClaimStatus::kPass : ClaimStatus::kInsufficient;
  return c;
}

Summary Summary::of(const std::vector<double>& v) {
  Summary s;
  s.n = static_cast<int64_t>(v.size());
  if (v.empty()) return s;
  std::vector<double> sorted = v;  // sorted once for every percentile
  std::sort(sorted.begin(), sorted.end());
  s.p50 = obs::percentile_sorted(sorted, 50);
  s.p90 = obs::percentile_sorted(sorted, 90);
  s.p99 = obs::percentile_sorted(sorted, 99);
  s.max = sorted.back();
  s.mean = obs::mean(v);
  return s;
}

nlohmann::json Summary::json() const {
  auto num = [&](double x) { return n ? nlohmann::json(round3(x)) : nullptr; };
  return {{"n", n},          {"p50", num(p50)}, {"p90", num(p90)},
          {"p99", num(p99)}, {"max", num(max)}, {"mean", num(mean)}};
}

void LogHistogram::add(double v) {
  if (!std::isfinite(v)) return;
  const int32_t i =
      v <= kLo
          ? 0
          : static_cast<int32_t>(std::min(1e6, std::floor(std::log(v / kLo) / std::log(kRatio))));
  ++buckets_[i];
  ++count_;
  max_ = std::max(max_, v);
}

double LogHistogram::quantile(double q) const {
  if (count_ == 0) return 0;
  // Nearest rank, as Summary does.
  const auto rank =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(q * static_cast<double>(count_))));
  int64_t seen = 0;
  for (const auto& [i, c] : buckets_) {
    seen += c;
    if (seen >= rank) return std::min(max_, kLo * std::pow(kRatio, i + 0.5));
  }
  return max_;
}

nlohmann::json LogHistogram::json() const {
  nlohmann::json b = nlohmann::json::array();
  for (const auto& [i, c] : buckets_) b.push_back({i, c});
  return {{"r", kRatio}, {"lo", kLo}, {"max", max_}, {"buckets", b}};
}

LogHistogram LogHistogram::from_json(const nlohmann::json& j) {
  auto number = [&](const char* k) {
    return j.contains(k) && j[k].is_number() ? j[k].get<double>() : -1.0;
  };
  if (!j.is_object() || !j.contains("buckets") || !j["buckets"].is_array() ||
      number("r") != kRatio || number("lo") != kLo || number("max") < 0)
    throw FormatError("histogram: expected {\"r\": 1.01, \"lo\": 0.001, \"buckets\": [...]}");
  LogHistogram h;
  for (const auto& b : j["buckets"]) {
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() < 0 || b[0].get<int64_t>() > 1'000'000 || b[1].get<int64_t>() < 0)
      throw FormatError("histogram: a bucket must be [index 0..1000000, count >= 0]");
    h.buckets_[b[0].get<int32_t>()] += b[1].get<int64_t>();
    h.count_ += b[1].get<int64_t>();
  }
  h.max_ = number("max");
  return h;
}

}  // namespace mmrt::verify
