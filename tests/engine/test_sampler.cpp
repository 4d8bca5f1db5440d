// Sampler checks against an independent double-precision model of the filtered distribution:
// the empirical frequencies of many seeded draws must match it (5-sigma binomial bound), and
// tokens outside the filter must never appear.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"
#include "engine/sampler.h"

using namespace mmrt;
using namespace mmrt::engine;

namespace {

std::vector<float> random_logits(int n, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> d(0.f, 2.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// Expected distribution, computed directly from the definitions.
std::vector<double> expected(const std::vector<float>& logits, const SamplingParams& p) {
  size_t n = logits.size();
  std::vector<double> z(n);
  for (size_t i = 0; i < n; ++i) z[i] = logits[i] / p.temperature;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return z[a] > z[b]; });
  size_t keep = p.top_k > 0 ? std::min<size_t>(n, static_cast<size_t>(p.top_k)) : n;
  double mx = z[order[0]], s = 0;
  std::vector<double> q(keep);
  for (size_t i = 0; i < keep; ++i) s += q[i] = std::exp(z[order[i]] - mx);
  for (auto& x : q) x /= s;
  size_t m = keep;
  if (p.min_p > 0) {
    m = 0;
    while (m < keep && q[m] >= p.min_p * q[0]) ++m;
  }
  if (p.top_p < 1) {
    double t = 0, c = 0;
    for (size_t i = 0; i < m; ++i) t += q[i];
    size_t k = 0;
    while (k < m) {
      c += q[k++] / t;
      if (c >= p.top_p) break;
    }
    m = k;
  }
  std::vector<double> out(n, 0.0);
  double t = 0;
  for (size_t i = 0; i < m; ++i) t += q[i];
  for (size_t i = 0; i < m; ++i) out[order[i]] = q[i] / t;
  return out;
}

void check_distribution(const SamplingParams& p, int vocab, int draws) {
  auto logits = random_logits(vocab, 7);
  auto want = expected(logits, p);
  std::vector<int> counts(static_cast<size_t>(vocab), 0);
  SamplingParams q = p;
  Sampler s(q);
  for (int i = 0; i < draws; ++i) {
    auto l = logits;
    counts[static_cast<size_t>(s.sample(l, {}))]++;
  }
  for (int i = 0; i < vocab; ++i) {
    double pi = want[static_cast<size_t>(i)];
    double f = static_cast<double>(counts[static_cast<size_t>(i)]) / draws;
    if (pi == 0.0) {
      EXPECT_EQ(counts[static_cast<size_t>(i)], 0) << "token " << i << " is outside the filter";
    } else {
      double sigma = std::sqrt(pi * (1 - pi) / draws);
      EXPECT_NEAR(f, pi, 5 * sigma + 1e-9) << "token " << i;
    }
  }
}

}  // namespace

TEST(Sampler, GreedyIsArgmax) {
  auto logits = random_logits(1000, 3);
  size_t best =
      static_cast<size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  Sampler s(SamplingParams{});
  auto l = logits;
  EXPECT_EQ(s.sample(l, {}), static_cast<int32_t>(best));
}

TEST(Sampler, TemperatureMatchesSoftmax) {
  check_distribution({.temperature = 0.7f}, 20, 40000);
}
TEST(Sampler, TopK) {
  check_distribution({.temperature = 1.0f, .top_k = 5}, 20, 40000);
}
TEST(Sampler, TopP) {
  check_distribution({.temperature = 1.3f, .top_p = 0.6f}, 20, 40000);
}
TEST(Sampler, MinP) {
  check_distribution({.temperature = 1.0f, .min_p = 0.2f}, 20, 40000);
}
TEST(Sampler, Combined) {
  check_distribution({.temperature = 0.9f, .top_k = 8, .top_p = 0.9f, .min_p = 0.05f}, 30, 40000);
}

TEST(Sampler, SeedIsReproducible) {
  auto logits = random_logits(500, 11);
  SamplingParams p{.temperature = 1.0f, .seed = 42};
  Sampler a(p), b(p);
  for (int i = 0; i < 50; ++i) {
    auto la = logits, lb = logits;
    EXPECT_EQ(a.sample(la, {}), b.sample(lb, {}));
  }
}

TEST(Sampler, RepetitionPenaltyHfStyle) {
  std::vector<float> l{2.0f, -1.0f, 1.5f};
  Sampler s({.repetition_penalty = 2.0f});
  std::vector<int32_t> prompt{0, 1};
  int32_t t = s.sample(l, prompt);
  EXPECT_FLOAT_EQ(l[0], 1.0f);   // positive logit divided
  EXPECT_FLOAT_EQ(l[1], -2.0f);  // negative logit multiplied
  EXPECT_FLOAT_EQ(l[2], 1.5f);
  EXPECT_EQ(t, 2);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesUseOutputCounts) {
  Sampler s({.presence_penalty = 0.5f, .frequency_penalty = 0.25f});
  s.accept(1);
  s.accept(1);
  std::vector<float> l{0.0f, 3.0f, 0.0f};
  s.sample(l, {});
  EXPECT_FLOAT_EQ(l[1], 3.0f - 0.5f - 0.5f);
  EXPECT_FLOAT_EQ(l[0], 0.0f);
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler({.temperature = -1.f}), InvalidArgument);
  EXPECT_THROW(Sampler({.top_p = 0.f}), InvalidArgument);
  EXPECT_THROW(Sampler({.top_k = -2}), InvalidArgument);
  EXPECT_THROW(Sampler({.max_tokens = 0}), InvalidArgument);
  EXPECT_THROW(Sampler({.stop = {""}}), InvalidArgument);
}

TEST(StopStrings, HoldsBackPartialMatchesAndCuts) {
  StopStringMatcher m({"</s>", "STOP"});
  EXPECT_EQ(m.push("hello <"), "hello ");
  EXPECT_EQ(m.push("/"), "");
  EXPECT_EQ(m.push("x"), "</x");  // not a stop string after all
  EXPECT_EQ(m.push(" ST"), " ");
  EXPECT_EQ(m.push("OP and more"), "");
  EXPECT_TRUE(m.finished());
  EXPECT_EQ(m.push("ignored"), "");
}

TEST(StopStrings, FlushReleasesTail) {
  StopStringMatcher m({"abc"});
  EXPECT_EQ(m.push("xxab"), "xx");
  EXPECT_FALSE(m.finished());
  EXPECT_EQ(m.flush(), "ab");
}

TEST(StopStrings, EarliestStopWins) {
  StopStringMatcher m({"world", "lo w"});
  EXPECT_EQ(m.push("hello world"), "hel");
}

// token_logprobs against a long-double log-softmax written here, on logits far from zero
// (the max shift matters) with ties (lower id first).
TEST(TokenLogprobs, MatchLogSoftmaxAndRankTheTop) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(40.0f, 6.0f);
  std::vector<float> logits(5000);
  for (auto& v : logits) v = nd(rng);
  logits[17] = logits[4000] = 80.0f;  // a tie for first place
  long double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<long double>(v) - 80.0L);
  const long double lse = 80.0L + std::log(sum);
  for (int32_t tok : {0, 17, 4000, 4999}) {
    const TokenLogprobs t = token_logprobs(logits, tok, 5);
    EXPECT_EQ(t.token, tok);
    EXPECT_NEAR(t.logprob, static_cast<double>(logits[tok] - lse), 1e-5);
    ASSERT_EQ(t.top.size(), 5u);
    EXPECT_EQ(t.top[0].first, 17);
    EXPECT_EQ(t.top[1].first, 4000);
    for (size_t i = 1; i < t.top.size(); ++i) EXPECT_GE(t.top[i - 1].second, t.top[i].second);
    for (const auto& [id, lp] : t.top) EXPECT_NEAR(lp, static_cast<double>(logits[id] - lse), 1e-5);
  }
  EXPECT_TRUE(token_logprobs(logits, 3, 0).top.empty());
  double mass = 0;
  for (const auto& [id, lp] : token_logprobs(logits, 3, 20).top) mass += std::exp(lp);
  EXPECT_LE(mass, 1.0 + 1e-6);
}
