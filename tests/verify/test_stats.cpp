// The binomial bound against the table of the SLA-gate spec (MLPerf's early-stopping numbers),
// the claim judgement, summaries and the log-linear histogram.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "verify/stats.h"

namespace mmrt::verify {
namespace {

TEST(Binomial, CdfMatchesDirectSums) {
  // P(Binomial(10, 0.5) <= 2) = (1 + 10 + 45) / 1024.
  EXPECT_NEAR(binomial_cdf(2, 10, 0.5), 56.0 / 1024.0, 1e-12);
  EXPECT_NEAR(binomial_cdf(0, 299, 0.01), std::pow(0.99, 299), 1e-12);
  EXPECT_EQ(binomial_cdf(-1, 10, 0.5), 0);
  EXPECT_EQ(binomial_cdf(10, 10, 0.5), 1);
}

TEST(Binomial, MinimumSamplesMatchTheSpecTable) {
  const int64_t over[] = {0, 1, 2, 5, 10};
  const int64_t c95[] = {299, 473, 628, 1049, 1693};
  const int64_t c99[] = {459, 662, 838, 1307, 2010};
  for (size_t i = 0; i < std::size(over); ++i) {
    EXPECT_EQ(min_samples(0.99, 0.95, over[i]), c95[i]) << "t = " << over[i];
    EXPECT_EQ(min_samples(0.99, 0.99, over[i]), c99[i]) << "t = " << over[i];
  }
}

TEST(Binomial, NineThousandSamplesAllowSeventyFourMisses) {
  // The spec: a 300 s run at 30 items/s may have at most 74 over-budget samples at 95 %.
  EXPECT_EQ(max_over_allowed(9000, 0.99, 0.95), 74);
  EXPECT_EQ(max_over_allowed(298, 0.99, 0.95), -1);
  EXPECT_EQ(max_over_allowed(299, 0.99, 0.95), 0);
}

TEST(Binomial, BadArgumentsAreRefused) {
  EXPECT_THROW(min_samples(1.0, 0.95, 0), InvalidArgument);
  EXPECT_THROW(min_samples(0.99, 0.0, 0), InvalidArgument);
  EXPECT_THROW(min_samples(0.99, 0.95, -1), InvalidArgument);
}

TEST(Claim, PassFailInsufficient) {
  EXPECT_EQ(judge_claim(300, 0, 0.99, 0.95).status, ClaimStatus::kPass);
  const Claim few = judge_claim(100, 0, 0.99, 0.95);
  EXPECT_EQ(few.status, ClaimStatus::kInsufficient);
  EXPECT_EQ(few.needed, 299);
  // 5 of 300 over budget: the sample P99 itself is over (at most 3 may be).
  EXPECT_EQ(judge_claim(300, 5, 0.99, 0.95).status, ClaimStatus::kFail);
  // 3 of 300: the sample P99 is within budget, but 3 misses need 777 samples.
  const Claim c = judge_claim(300, 3, 0.99, 0.95);
  EXPECT_EQ(c.status, ClaimStatus::kInsufficient);
  EXPECT_EQ(c.needed, min_samples(0.99, 0.95, 3));
  EXPECT_GT(c.needed, 628);
  // P90 of 300 with 30 over: the nearest-rank P90 (rank 270) is still within budget, so the
  // claim lacks samples rather than failing; 31 over fails.
  EXPECT_EQ(over_allowed_by_rank(300, 0.9), 30);
  EXPECT_EQ(judge_claim(300, 30, 0.9, 0.95).status, ClaimStatus::kInsufficient);
  EXPECT_EQ(judge_claim(300, 31, 0.9, 0.95).status, ClaimStatus::kFail);
  EXPECT_EQ(over_allowed_by_rank(300, 0.99), 3);
  EXPECT_EQ(over_allowed_by_rank(1, 0.99), 0);
  // P50: 20 samples with 5 over.
  EXPECT_EQ(judge_claim(20, 5, 0.5, 0.95).status, ClaimStatus::kPass);
}

TEST(Summary, NearestRank) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  const Summary s = Summary::of(v);
  EXPECT_EQ(s.n, 100);
  EXPECT_EQ(s.p50, 50);
  EXPECT_EQ(s.p99, 99);
  EXPECT_EQ(s.max, 100);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_TRUE(Summary::of({}).json()["p50"].is_null());
}

TEST(LogHistogram, QuantilesWithinOnePercentAndRoundTrip) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> d(3, 1);
  std::vector<double> v;
  LogHistogram h;
  for (int i = 0; i < 20000; ++i) {
    v.push_back(d(rng));
    h.add(v.back());
  }
  const Summary s = Summary::of(v);
  EXPECT_NEAR(h.quantile(0.5), s.p50, s.p50 * 0.01);
  EXPECT_NEAR(h.quantile(0.99), s.p99, s.p99 * 0.01);
  EXPECT_EQ(h.max(), s.max);
  const LogHistogram back = LogHistogram::from_json(h.json());
  EXPECT_EQ(back.count(), h.count());
  EXPECT_EQ(back.quantile(0.99), h.quantile(0.99));
  EXPECT_THROW(
      LogHistogram::from_json(nlohmann::json::parse(R"({"r":1.01,"lo":0.001,"buckets":[[-1,2]]})")),
      FormatError);
  EXPECT_THROW(LogHistogram::from_json(nlohmann::json::parse(R"({"r":2,"lo":0.001,"buckets":[]})")),
               FormatError);
  // Mistyped fields are format errors too, not library exceptions.
  EXPECT_THROW(LogHistogram::from_json(
                   nlohmann::json::parse(R"({"r":"1.01","lo":0.001,"max":1,"buckets":[]})")),
               FormatError);
  EXPECT_THROW(LogHistogram::from_json(
                   nlohmann::json::parse(R"({"r":1.01,"lo":0.001,"max":"12","buckets":[]})")),
               FormatError);
}

}  // namespace
}  // namespace mmrt::verify
