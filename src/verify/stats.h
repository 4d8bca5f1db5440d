// The statistics behind `mmrt verify`'s verdict: the binomial bound that says how many samples a
// percentile claim needs (MLPerf's early-stopping rule), distribution summaries, and a log-linear
// histogram (1 % relative error) that baselines store.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mmrt::verify {

// Milliseconds as messages show them ("4.6 ms", "412 ms"), and a figure rounded to 3 decimals
// for JSON.
std::string format_ms(double ms);
double round3(double x);

// P(X <= t) for X ~ Binomial(n, p), computed in log space (stable for n in the millions).
double binomial_cdf(int64_t t, int64_t n, double p);

// The claim "the q-quantile is <= X at confidence c" from n samples of which `over` exceed X
// holds when P(Binomial(n, 1 - q) <= over) <= 1 - c. min_samples: the smallest n for which it
// holds with `over` samples over budget (q = 0.99, c = 0.95: 299 for none over, 473 for one).
int64_t min_samples(double q, double confidence, int64_t over);
// The largest `over` that n samples still support (-1: not even none over is enough).
int64_t max_over_allowed(int64_t n, double q, double confidence);

// How many of n samples may exceed X with the nearest-rank q-quantile still <= X.
int64_t over_allowed_by_rank(int64_t n, double q);

enum class ClaimStatus { kPass, kFail, kInsufficient };
const char* to_string(ClaimStatus s);  // "pass", "fail", "insufficient"
// A percentile claim judged: kFail when the sample quantile itself is over budget (more than
// over_allowed_by_rank(n, q) samples over), kInsufficient when it is not but n is below
// min_samples, kPass otherwise. `needed` is min_samples(q, c, over).
struct Claim {
  int64_t samples = 0, over = 0, needed = 0;
  ClaimStatus status = ClaimStatus::kInsufficient;
};
Claim judge_claim(int64_t samples, int64_t over, double q, double confidence);

// Summary of a sample (ms): nearest-rank percentiles; all 0 when empty.
struct Summary {
  int64_t n = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
  static Summary of(const std::vector<double>& v);
  nlohmann::json json() const;  // {"n","p50","p90","p99","max","mean"}; nulls when n == 0
};

// Log-linear histogram of positive values: bucket i holds [lo * r^i, lo * r^(i+1)) with r = 1.01
// (every value within 1 % of its bucket), values <= lo in bucket 0.
class LogHistogram {
 public:
  static constexpr double kLo = 1e-3;  // 1 us when values are ms
  void add(double v);
  int64_t count() const { return count_; }
  double max() const { return max_; }
  // The q-quantile's bucket midpoint (0 when empty).
  double quantile(double q) const;
  nlohmann::json json() const;  // {"r":1.01,"lo":..,"max":..,"buckets":[[index,count],...]}
  static LogHistogram from_json(const nlohmann::json& j);  // FormatError on a malformed object

 private:
  std::map<int32_t, int64_t> buckets_;
  int64_t count_ = 0;
  double max_ = 0;
};

}  // namespace mmrt::verify
