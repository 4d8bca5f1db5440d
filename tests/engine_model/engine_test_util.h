// Shared by the engine-on-a-real-model suites: an engine config over a tiny checkpoint and a
// plain text request.
#pragma once

#include <string>

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

}  // namespace mmrt::test
