// Batch invariance (BackendOptions::batch_invariant) on a bf16 tiny checkpoint with a bf16 KV
// cache: every request's log-probabilities (5 per token, the chosen token's and the top 5) are
// the same bits whether it runs alone in one prefill step, batched with others in small chunks
// under preemption, from a cached prefix, or continued from its own first tokens (resume_ids:
// those tokens prefilled, not decoded, as a stream resumed on another worker is). The same runs
// without the option differ in some bit: the comparison can tell.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "models/qwen2_vl/tiny_checkpoint.h"

namespace fs = std::filesystem;
using namespace mmrt;
using namespace mmrt::engine;

namespace {

class Invariant : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("mmrt_engine_invariant_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    models::qwen2_vl::TinyOptions o;
    o.dtype = DType::kBF16;
    o.seed = 5;
    models::qwen2_vl::make_tiny_checkpoint(dir_.string(), o);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static EngineConfig config(bool invariant, int32_t budget, int32_t kv_blocks) {
    EngineConfig c = test::engine_config(dir_.string(), budget, kv_blocks, true);
    c.kv.dtype = DType::kBF16;
    c.backend.batch_invariant = invariant;
    c.admission_control = false;
    c.calibrate_encoder = false;
    return c;
  }

  static std::vector<GenerateRequest> workload() {
    std::vector<GenerateRequest> w;
    const char* texts[] = {"Tell me a story about a cat and a long river.", "hello",
                           "Explain batch invariance in one paragraph, please.",
                           "A much longer prompt about caches, steps and chunks, repeated. "
                           "A much longer prompt about caches, steps and chunks, repeated.",
                           "Short one."};
    int n = 14;
    for (const char* t : texts) {
      GenerateRequest g = test::text_request(t, n);
      g.sampling.logprobs = 5;
      w.push_back(g);
      n += 3;
    }
    return w;
  }

  static fs::path dir_;
};
fs::path Invariant::dir_;

// The bits of every log-probability a request reported.
std::vector<uint32_t> bits(const RequestResult& r) {
  std::vector<uint32_t> out;
  for (const TokenLogprobs& t : r.logprobs) {
    auto push = [&](float f) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      out.push_back(u);
    };
    out.push_back(static_cast<uint32_t>(t.token));
    push(t.logprob);
    for (const auto& [id, lp] : t.top) {
      out.push_back(static_cast<uint32_t>(id));
      push(lp);
    }
  }
  return out;
}

// Runs the workload alone (one prefill step each, nothing cached), then all at once twice on an
// engine with 12-token steps and a KV cache too small for the batch (preemption; the second
// round from the prefix cache), then each request continued from its first 5 tokens. Returns how
// many runs differed in any bit from the request alone.
int differing_runs(bool invariant) {
  const std::vector<GenerateRequest> w = Invariant::workload();
  std::vector<RequestResult> alone;
  {
    auto eng = Engine::create(Invariant::config(invariant, 4096, 256));
    for (const auto& g : w) {
      alone.push_back(eng->submit(g).wait());
      EXPECT_EQ(alone.back().outcome, Outcome::kFinished) << alone.back().reason;
    }
  }
  int differ = 0;
  auto eng = Engine::create(Invariant::config(invariant, 12, 14));
  for (int round = 0; round < 2; ++round) {
    std::vector<RequestHandle> hs;
    for (const auto& g : w) hs.push_back(eng->submit(g));
    for (size_t i = 0; i < hs.size(); ++i) {
      const RequestResult r = hs[i].wait();
      EXPECT_EQ(r.outcome, Outcome::kFinished) << r.reason;
      differ += bits(r) != bits(alone[i]);
      if (invariant) {
        EXPECT_EQ(r.tokens, alone[i].tokens) << "request " << i << ", round " << round;
        EXPECT_EQ(bits(r), bits(alone[i])) << "request " << i << ", round " << round;
      }
    }
  }
  const EngineStats s = eng->stats();
  EXPECT_GT(s.preemptions, 0) << "the KV cache was meant to be too small for the batch";
  EXPECT_GT(s.prefix_hit_tokens, 0) << "the second round was meant to hit the prefix cache";
  // Continued from its own first 5 tokens: those are prefilled with the prompt, in 12-token
  // chunks, and what follows must be what the run alone decoded.
  for (size_t i = 0; i < w.size(); ++i) {
    GenerateRequest g = w[i];
    g.resume_ids.assign(alone[i].tokens.begin(), alone[i].tokens.begin() + 5);
    const RequestResult r = eng->submit(g).wait();
    EXPECT_EQ(r.outcome, Outcome::kFinished) << r.reason;
    RequestResult rest = alone[i];
    rest.logprobs.erase(rest.logprobs.begin(), rest.logprobs.begin() + 5);
    differ += bits(r) != bits(rest);
    if (invariant) {
      EXPECT_EQ(r.tokens, std::vector<int32_t>(alone[i].tokens.begin() + 5, alone[i].tokens.end()))
          << "request " << i << " resumed";
      EXPECT_EQ(bits(r), bits(rest)) << "request " << i << " resumed";
    }
  }
  return differ;
}

}  // namespace

TEST_F(Invariant, EveryRunOfARequestHasTheSameBits) {
  EXPECT_EQ(differing_runs(true), 0);
}

TEST_F(Invariant, WithoutItTheSameRunsDiffer) {
  const int differ = differing_runs(false);
  std::printf("without batch invariance %d of 15 runs differ from the request alone\n", differ);
  EXPECT_GT(differ, 0) << "the comparison must be able to tell";
}
