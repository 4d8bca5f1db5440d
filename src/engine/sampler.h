// Token sampling (greedy, temperature, top-k, top-p, min-p, repetition / presence / frequency
// penalties, seeded) and stop conditions (stop token ids, stop strings, max tokens).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mmrt::kernels {
struct LogitEdit;  // kernels/sampling.h
}

namespace mmrt::engine {

// What drawing one token depends on (the plain-data part of SamplingParams).
struct SamplerSettings {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f, min_p = 0.0f;
  float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  uint64_t seed = 0;
  bool needs_history() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax after penalties; NaN largest)
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // HF style, over prompt + output tokens
  float presence_penalty = 0.0f;    // OpenAI style, over output tokens
  float frequency_penalty = 0.0f;   // OpenAI style, over output tokens
  uint64_t seed = 0;
  int32_t max_tokens = 256;
  std::vector<std::string> stop;        // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;  // in addition to the model's end-of-turn ids
  bool ignore_eos = false;
  // -1: none; 0..20: each output token's log-probability under the model (log-softmax of the
  // raw logits, before penalties, temperature and filters) with this many most likely tokens.
  int32_t logprobs = -1;

  // Throws InvalidArgument naming the bad field (negative temperature, top_p outside (0,1], ...).
  void validate() const;
  SamplerSettings sampler() const;
};

// One output token's log-probability and the most likely tokens at its position.
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

// log-softmax of `logits` (computed in double) at `token`, and the `k` most likely tokens (ties:
// lower id first). `logits` are the model's raw scores.
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int k);

// The penalties of `s` as edits of row `row` (kernels::LogitEdit, one per token, tokens outside
// [0, vocab) left out), appended to `edits`: the repetition penalty over every token of `prompt`
// and `output`, presence and frequency over `output`. Nothing when `s` has no penalty.
void penalty_edits(const SamplerSettings& s, int32_t row, int64_t vocab,
                   std::span<const int32_t> prompt, std::span<const int32_t> output,
                   std::vector<kernels::LogitEdit>& edits);

// The draw from candidates (logit / temperature, id) sorted best first (equal values: the lower
// id first) after the top-k cut: softmax over them in double, min-p, top-p, then the draw's
// random number. The last step of sample_token; the engine calls it on the candidates a device
// returns (kernels::top_k_rows).
int32_t draw_candidate(std::span<const std::pair<float, int32_t>> sorted, const SamplerSettings& s,
                       uint64_t draw);

// sample_token on logits its penalties have already edited.
int32_t sample_edited(std::span<const float> logits, const SamplerSettings& s, uint64_t draw,
                      std::vector<std::pair<float, int32_t>>& scratch);

// Applies penalties and filters to `logits` in place and draws one token id. A pure function of
// its arguments: draw `draw` of a request (its output length so far) uses a random stream
// derived from (seed, draw), so a request gives the same tokens however it is batched, chunked
// or preempted. `prompt` feeds the repetition penalty, `output` (the tokens generated so far)
// the repetition, presence and frequency penalties; both may be empty when no penalty is set.
// `scratch` is reusable working memory.
int32_t sample_token(std::span<float> logits, const SamplerSettings& s, uint64_t draw,
                     std::span<const int32_t> prompt, std::span<const int32_t> output,
                     std::vector<std::pair<float, int32_t>>& scratch);

// sample_token for one sequence drawn repeatedly: keeps the tokens it produced (the next draw's
// index and penalty history).
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Draws the next token; `prompt` is the prompt's ids (for the repetition penalty).
  int32_t sample(std::span<float> logits, std::span<const int32_t> prompt);
  // Records a token as generated (sample() does this itself; use for forced tokens).
  void accept(int32_t token);

 private:
  SamplerSettings s_;
  std::vector<int32_t> output_;
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
