// The executor's sampling stage (engine/step_sampler.h) against sample_token on a host copy of
// each row: the same tokens and log-probabilities for every kind of row (greedy, penalties, top-k
// with and without min-p / top-p, the whole vocabulary, log-probabilities), on the CPU and on the
// emulated device (memory called a GPU's, so a host read of device memory fails there), and only
// ids and candidates cross to the host for greedy and top-k rows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../common/emulated_device.h"
#include "engine/step_sampler.h"
#include "kernels/cpu/cpu_backend.h"

using namespace mmrt;
using namespace mmrt::engine;

namespace {

constexpr int64_t kVocab = 4099;

std::vector<SampleSpec> mixed_specs() {
  std::vector<SampleSpec> s(9);
  s[1].settings.repetition_penalty = 1.3f;  // greedy with penalties
  s[1].prompt = {3, 9, 9, 4000, 5000};      // 5000: outside the vocabulary, ignored
  s[1].output = {7, 7, 12};
  s[1].settings.presence_penalty = 0.5f;
  s[1].settings.frequency_penalty = 0.25f;
  s[2].settings = {.temperature = 0.8f, .top_k = 40, .seed = 11};  // top-k
  s[3].settings = {.temperature = 1.2f, .top_k = 200, .top_p = 0.7f, .min_p = 0.02f, .seed = 5};
  s[3].draw = 17;
  s[4].settings = {.temperature = 0.9f, .seed = 3};                 // the whole vocabulary
  s[5].settings = {.temperature = 0.6f, .top_k = 5000, .seed = 8};  // k over the vocabulary
  s[6].logprobs = 5;                                                // greedy with logprobs
  s[6].settings.repetition_penalty = 0.8f;
  s[6].output = {1, 2, 3};
  s[7].settings = {.temperature = 1.0f, .top_k = 1024, .repetition_penalty = 1.1f, .seed = 1};
  s[7].output = {100, 101};
  s[7].logprobs = 0;
  s[8].settings = {.temperature = 2.0f, .top_k = 1, .seed = 2};
  return s;
}

std::vector<float> logits(size_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 3.f);
  std::vector<float> x(rows * kVocab);
  for (float& v : x) v = std::round(d(rng) * 16.0f) / 16.0f;  // ties among the candidates
  return x;
}

void expect_as_sample_token(const kernels::Backend& be) {
  const std::vector<SampleSpec> specs = mixed_specs();
  std::vector<const SampleSpec*> ptrs;
  for (const SampleSpec& s : specs) ptrs.push_back(&s);
  StepSampler sampler;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const std::vector<float> host = logits(specs.size(), seed);
    Tensor x = be.empty(DType::kF32, {static_cast<int64_t>(specs.size()), kVocab});
    be.copy_to_device(x.raw(), host.data(), host.size() * sizeof(float));
    std::vector<int32_t> tokens;
    std::vector<TokenLogprobs> lp;
    sampler.sample(be, x, ptrs, tokens, lp);
    ASSERT_EQ(tokens.size(), specs.size());
    ASSERT_EQ(lp.size(), specs.size());
    std::vector<std::pair<float, int32_t>> scratch;
    for (size_t i = 0; i < specs.size(); ++i) {
      std::vector<float> row(host.begin() + static_cast<long>(i * kVocab),
                             host.begin() + static_cast<long>((i + 1) * kVocab));
      const std::vector<float> raw = row;
      const SampleSpec& s = specs[i];
      const int32_t want = sample_token(row, s.settings, s.draw, s.prompt, s.output, scratch);
      EXPECT_EQ(tokens[i], want) << "row " << i << ", logits seed " << seed;
      if (s.logprobs >= 0) {
        const TokenLogprobs w = token_logprobs(raw, want, s.logprobs);
        EXPECT_EQ(lp[i].token, w.token);
        EXPECT_EQ(lp[i].logprob, w.logprob);
        EXPECT_EQ(lp[i].top, w.top);
      }
    }
  }
}

TEST(StepSampler, DrawsAsSampleTokenOnTheCpu) {
  expect_as_sample_token(kernels::CpuBackend({.threads = 1}));
}

TEST(StepSampler, DrawsAsSampleTokenOnADevice) {
  expect_as_sample_token(test::EmulatedDevice({.threads = 1}));
}

// Greedy rows with ties and NaN: the device op's argmax and sample_token's agree (NaN wins, the
// first of equals).
TEST(StepSampler, GreedyTiesAndNanAsSampleToken) {
  const kernels::CpuBackend be({.threads = 1});
  std::vector<SampleSpec> specs(4);
  std::vector<const SampleSpec*> ptrs{&specs[0], &specs[1], &specs[2], &specs[3]};
  std::vector<float> host(4 * kVocab, 1.0f);                // row 0: all equal
  host[kVocab + 7] = host[kVocab + 9] = 2.0f;               // row 1: a tie
  host[2 * kVocab + 5] = NAN, host[2 * kVocab + 6] = 9.0f;  // row 2: NaN first
  host[3 * kVocab] = -0.0f;                                 // row 3: zeros of both signs
  std::fill(host.begin() + 3 * kVocab + 1, host.end(), 0.0f);
  Tensor x = be.empty(DType::kF32, {4, kVocab});
  be.copy_to_device(x.raw(), host.data(), host.size() * sizeof(float));
  StepSampler sampler;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> lp;
  sampler.sample(be, x, ptrs, tokens, lp);
  std::vector<std::pair<float, int32_t>> scratch;
  for (size_t i = 0; i < 4; ++i) {
    std::vector<float> row(host.begin() + static_cast<long>(i * kVocab),
                           host.begin() + static_cast<long>((i + 1) * kVocab));
    EXPECT_EQ(tokens[i], sample_token(row, specs[i].settings, 0, {}, {}, scratch)) << i;
  }
  EXPECT_EQ(tokens, (std::vector<int32_t>{0, 7, 5, 0}));
}

TEST(StepSampler, GreedyAndTopKRowsBringBackOnlyIdsAndCandidates) {
  const test::EmulatedDevice be({.threads = 1});
  std::vector<SampleSpec> specs(4);
  specs[1].settings = {.temperature = 0.7f, .top_k = 50, .seed = 4};
  specs[2].settings.repetition_penalty = 1.2f;
  specs[2].prompt = {1, 2, 3};
  specs[3].settings = {.temperature = 0.7f, .seed = 4};  // the whole vocabulary comes back
  std::vector<const SampleSpec*> ptrs{&specs[0], &specs[1], &specs[2], &specs[3]};
  const std::vector<float> host = logits(4, 9);
  Tensor x = be.empty(DType::kF32, {4, kVocab});
  be.copy_to_device(x.raw(), host.data(), host.size() * sizeof(float));
  const kernels::TransferStats before = be.transfers();
  StepSampler sampler;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> lp;
  sampler.sample(be, x, ptrs, tokens, lp);
  const kernels::TransferStats after = be.transfers();
  // At most two greedy ids and 50 candidates of 8 bytes besides the one whole row (a GPU copies
  // the ids and candidates; the emulated device's CPU kernels write them to the host directly).
  const uint64_t row = kVocab * sizeof(float);
  EXPECT_GE(after.to_host_bytes - before.to_host_bytes, row);
  EXPECT_LE(after.to_host_bytes - before.to_host_bytes, row + 2 * 4 + 50 * 8);
  EXPECT_TRUE(lp.empty());
}

}  // namespace
