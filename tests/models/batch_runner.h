// Test helper: a direct generation loop over a model's Runner with no engine in between. It runs
// a fixed set of text requests to completion, batching every step (decode tokens of running
// sequences first, then prefill chunks of waiting ones within a token budget), with a trivial
// block assignment (each request gets its own contiguous block range). The model tests use it to
// check batching invariance and greedy tokens against the reference independently of the
// engine's scheduler.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "engine/sampler.h"

namespace mmrt::io {
class Tokenizer;
}
namespace mmrt::models {
class Session;
}

namespace mmrt::engine {

struct TextRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // end-of-turn ids (plus sampling.stop_token_ids)
  // Multimodal prompts: M-RoPE positions [3, prompt.size()] (empty: text positions) and the
  // decode offset, plus embeddings replacing the prompt rows listed in embed_rows (ascending).
  std::vector<int32_t> positions;
  int32_t rope_delta = 0;
  std::vector<int32_t> embed_rows;
  Tensor embeds;  // [embed_rows.size(), hidden] f32
};

struct TextResult {
  std::vector<int32_t> tokens;  // generated ids (the stop token is not included)
  std::string text;             // decoded, stop strings removed
  std::string finish_reason;    // "stop" (stop token or string) or "length"
  int64_t first_token_ns = 0;   // since run() started
  int64_t end_ns = 0;
};

struct RunStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;  // steps with / without prefill tokens
  int64_t steps = 0;
};

struct BatchRunnerOptions {
  int32_t step_token_budget = 512;  // new tokens per step, decode + prefill
  // Called as text becomes available: (request index, text piece).
  std::function<void(size_t, const std::string&)> on_text;
};

// Runs all requests; throws ResourceExhausted if the KV cache cannot hold every request's
// prompt + max_tokens at once.
std::vector<TextResult> run_text_batch(models::Session& model, const io::Tokenizer& tok,
                                       const std::vector<TextRequest>& requests,
                                       const BatchRunnerOptions& opts, RunStats* stats = nullptr);

}  // namespace mmrt::engine
