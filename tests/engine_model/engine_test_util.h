// Shared by the engine-on-a-real-model suites: an engine config over a tiny checkpoint and a
// plain text request.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace mmrt::test {

// f32 KV of `kv_blocks` blocks, `budget` tokens per step, prefix caching on or off.
inline engine::EngineConfig engine_config(const std::string& model_dir, int32_t budget,
                                          int32_t kv_blocks, bool prefix = true) {
  engine::EngineConfig c;
  c.model_dir = model_dir;
  c.kv.dtype = DType::kF32;
  c.kv.blocks = kv_blocks;
  c.scheduler.token_budget = budget;
  c.prefix_caching = prefix;
  return c;
}

// One user message; exactly `max_tokens` generated (EOS ignored).
inline engine::GenerateRequest text_request(const std::string& text, int max_tokens) {
  engine::GenerateRequest g;
  g.messages.push_back(models::ChatMessage::text("user", text));
  g.sampling.max_tokens = max_tokens;
  g.sampling.ignore_eos = true;
  return g;
}

struct AloneVsBatched {
  std::vector<int64_t> prompt_tokens;  // per request, from its run alone
  engine::EngineStats stats;           // of the batched engine, after both rounds
};

// Runs each request of `w` alone on an engine made with `alone`, then all of them at once, twice
// (the second round hits the caches), on one engine made with `batched`: every request must
// finish, each time with the tokens it gave alone.
inline AloneVsBatched expect_batched_match_alone(const std::vector<engine::GenerateRequest>& w,
                                                 const engine::EngineConfig& alone,
                                                 const engine::EngineConfig& batched) {
  AloneVsBatched out;
  std::vector<std::vector<int32_t>> tokens;
  {
    auto eng = engine::Engine::create(alone);
    for (const auto& g : w) {
      engine::RequestResult r = eng->submit(g).wait();
      EXPECT_EQ(r.outcome, engine::Outcome::kFinished) << r.reason;
      tokens.push_back(r.tokens);
      out.prompt_tokens.push_back(r.prompt_tokens);
    }
  }
  auto eng = engine::Engine::create(batched);
  for (int round = 0; round < 2; ++round) {
    std::vector<engine::RequestHandle> hs;
    for (const auto& g : w) hs.push_back(eng->submit(g));
    for (size_t i = 0; i < hs.size(); ++i) {
      engine::RequestResult r = hs[i].wait();
      EXPECT_EQ(r.outcome, engine::Outcome::kFinished) << r.reason;
      EXPECT_EQ(r.tokens, tokens[i]) << "request " << i << " round " << round;
    }
  }
  out.stats = eng->stats();
  return out;
}

}  // namespace mmrt::test
