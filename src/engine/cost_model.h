// Step-time cost model for admission control and the batch controller:
//   t_step ≈ c0 + c1·prefill_tokens + c2·decode_tokens + c4·context_tokens      (the model)
//          + c6·prefill_pairs
//          + c3·encoder_patches + c5·encoder_items                               (its encoders)
// calibrated online from observed step times (recursive least squares with forgetting; the
// covariance is bounded so unexcited directions cannot wind up), and a TTFT predictor built on
// it. The two lines are fitted apart: the executor times each encoder job, so the encoder terms
// learn from the encoders' own time and the model's from the rest of the step. Fitted together
// they could not be told apart where every prefill carries an image of one size (image-only
// traffic: prompt tokens and patches move as one), and the fit swung to absurd prices (a 123-token
// image request predicted at 1.9 s against 35 ms, every request refused, and no step ever ran
// again to correct it). A model coefficient may come out negative where features move together
// (the fit is right on the steps the engine runs, not per feature); predictions are clamped. The
// encoder terms are kept in bounds: an item's fixed cost (launch, patch embedding of a tiny
// image) is its own term, per patch within a factor kEncoderBand of the measured or prior cost,
// per item in [0, kMaxItemMs], so that a run of tiny images cannot make a normal image's price
// absurd for every tenant. A prompt's attention grows with its own length: each chunk's queries
// attend everything before them (prefill_pairs), so a prompt's cost is quadratic in its length,
// which one context count per sequence (right for a decoding sequence's one query) cannot show: a
// 9,038-token prompt was predicted at 4.3 s, admitted against silver's 5 s, and refused late
// 1.5 s into a ~9.6 s prefill. Prediction errors are tracked and reported.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mmrt::engine {

struct StepFeatures {
  double prefill_tokens = 0, decode_tokens = 0, encoder_patches = 0;
  double context_tokens = 0;  // KV tokens attended by the step's queries (sum over sequences)
  double encoder_items = 0;   // encoder jobs (media items) the step runs
  double prefill_pairs = 0;   // query-key pairs of its prompt chunks (causal_pairs of each)
};

// The causal attention's query-key pairs of prompt tokens [from, to): token i attends i + 1.
inline double causal_pairs(double from, double to) {
  return to > from ? (to * (to + 1) - from * (from + 1)) / 2 : 0.0;
}

struct PredictionError {
  int64_t count = 0;
  double mean_abs_rel = 0;  // mean |predicted - actual| / actual
  double p50_abs_rel = 0, p90_abs_rel = 0;
  double mean_signed_rel = 0;  // > 0: predictions too high
};

class CostModel {
 public:
  // Priors: a rough guess that online calibration replaces within a few dozen steps.
  explicit CostModel(double forgetting = 0.98);

  // Replaces the prior of the encoder term with a measured cost per encoder unit (the engine's
  // load-time calibration); the online fit goes on from it.
  void set_encoder_cost(double ns_per_unit);

  double predict_ns(const StepFeatures& f) const;
  // One step's time, `encoder_ns` of it in its encoder jobs (< 0: not measured; the encoders'
  // share is then taken as predicted).
  void observe(const StepFeatures& f, double step_ns, double encoder_ns = -1);
  int64_t observations() const { return n_obs_; }
  // Per unit of each feature (c0 per step), as fitted (may be negative, see above); the five of
  // the formula's first line (encoder items: encoder_item_ns(), prompt pairs: pair_ns()).
  std::array<double, 5> coefficients_ns() const;
  double encoder_item_ns() const;
  double pair_ns() const;  // per query-key pair of a prompt, at least 0
  static constexpr double kEncoderBand = 8, kMaxItemMs = 500;

  // Predicted time to first token for `prefill_tokens` of new prompt (+ encoder patches of
  // `items` media items) when `queued_prefill_tokens` / `queued_patches` / `queued_items` are
  // ahead of it and `n_decode` sequences decode alongside, with `budget` tokens per step;
  // `prompt_pairs`: the attention pairs of all those prompt tokens (causal_pairs of each
  // prompt's remaining span).
  double predict_ttft_ns(double prefill_tokens, double patches, double queued_prefill_tokens,
                         double queued_patches, int64_t n_decode, double context_tokens,
                         int64_t budget, double items = 0, double queued_items = 0,
                         double prompt_pairs = 0) const;

  void record_ttft(double predicted_ns, double actual_ns);
  PredictionError ttft_error() const;

 private:
  // Recursive least squares over N scaled features (values of order 1), in ms.
  template <size_t N>
  struct Fit {
    std::array<double, N> theta{};
    std::array<std::array<double, N>, N> P{};
    double predict(const std::array<double, N>& x) const;
    void update(const std::array<double, N>& x, double y, double forgetting);
  };
  static std::array<double, 5> model_features(const StepFeatures& f);
  static std::array<double, 2> encoder_features(const StepFeatures& f);
  double encoder_ms(const StepFeatures& f) const;
  double forgetting_;
  Fit<5> model_;          // per step, prefill token, decode token, context token, prompt pair
  Fit<2> encoder_;        // per encoder patch, per encoder item
  double patch_ref_ = 0;  // the per-patch cost the encoder term is kept near (ms per 1000)
  int64_t n_obs_ = 0;
  std::vector<double> errors_;  // signed relative errors
};

}  // namespace mmrt::engine
