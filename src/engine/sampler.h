// Token sampling (greedy, temperature, top-k, top-p, min-p, repetition / presence / frequency
// penalties, seeded) and stop conditions (stop token ids, stop strings, max tokens).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace mmrt::engine {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax after penalties)
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // HF style, over prompt + output tokens
  float presence_penalty = 0.0f;    // OpenAI style, over output tokens
  float frequency_penalty = 0.0f;   // OpenAI style, over output tokens
  uint64_t seed = 0;
  int32_t max_tokens = 256;
  std::vector<std::string> stop;          // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;    // in addition to the model's end-of-turn ids
  bool ignore_eos = false;

  // Throws InvalidArgument naming the bad field (negative temperature, top_p outside (0,1], ...).
  void validate() const;
};

// Per-request sampler state: its own RNG and the counts of generated tokens.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Applies penalties and filters to `logits` in place and draws one token id.
  // `prompt` is the prompt's ids (for the repetition penalty).
  int32_t sample(std::span<float> logits, std::span<const int32_t> prompt);
  // Records a token as generated (sample() does this itself; use for forced tokens).
  void accept(int32_t token);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::vector<std::pair<float, int32_t>> scratch_;
};

// Watches the streamed text for stop strings. Text that might be the start of a stop string is
// held back until it is known not to be; once a stop string appears, the text before it is
// released and finished() turns true.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);
  // Feeds newly decoded text; returns the text safe to emit now.
  std::string push(const std::string& text);
  // End of generation: returns whatever is still held back (no stop string was completed).
  std::string flush();
  bool finished() const { return finished_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool finished_ = false;
};

}  // namespace mmrt::engine
