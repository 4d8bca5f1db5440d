#include "engine/cost_model.h"

#include <algorithm>
#include <cmath>

namespace mmrt::engine {

namespace {
// Feature scales keep the regression well conditioned (values of order 1).
constexpr double kPrefillScale = 100, kDecodeScale = 10, kContextScale = 10000;
constexpr double kPatchScale = 1000, kItemScale = 1, kPairScale = 1e6;
constexpr double kPrior = 100.0;    // initial covariance per coefficient
constexpr double kMinStepMs = 0.1;  // no step is predicted faster
}  // namespace

template <size_t N>
double CostModel::Fit<N>::predict(const std::array<double, N>& x) const {
  double ms = 0;
  for (size_t i = 0; i < N; ++i) ms += theta[i] * x[i];
  return ms;
}

template <size_t N>
void CostModel::Fit<N>::update(const std::array<double, N>& x, double y, double forgetting) {
  std::array<double, N> Px{};
  for (size_t i = 0; i < N; ++i)
    for (size_t j = 0; j < N; ++j) Px[i] += P[i][j] * x[j];
  double denom = forgetting;
  for (size_t i = 0; i < N; ++i) denom += x[i] * Px[i];
  const double err = y - predict(x);
  // No coefficient is clamped here: over collinear features (decode count and context grow
  // together in a latency-bound engine) the fit may put a negative cost on one feature and
  // offset it on another, which is right on the steps the engine runs; clamping the negative
  // part at prediction broke that compensation and over-predicted those steps 4-5x
  // (tests: CostModel.StaysAccurateOnCollinearNoisySteps). Predictions are clamped instead.
  for (size_t i = 0; i < N; ++i) theta[i] += Px[i] / denom * err;
  for (size_t i = 0; i < N; ++i)
    for (size_t j = 0; j < N; ++j) P[i][j] = (P[i][j] - Px[i] * Px[j] / denom) / forgetting;
  // Anti-windup: forgetting inflates P by 1/forgetting per step in directions the steps do not
  // excite; bounded at the prior's size, one unusual step cannot swing the fit.
  double trace = 0;
  for (size_t i = 0; i < N; ++i) trace += P[i][i];
  const double bound = kPrior * static_cast<double>(N);
  if (trace > bound)
    for (auto& row : P)
      for (double& v : row) v *= bound / trace;
}

CostModel::CostModel(double forgetting) : forgetting_(forgetting) {
  // Prior (ms per scaled unit): 2 ms per step, 5 ms per 100 prefill tokens, 1 ms per 10
  // decodes, 1 ms per 10k context tokens, 1 ms per million prompt pairs; 10 ms per 1000
  // patches, 1 ms per encoder item.
  model_.theta = {2.0, 5.0, 1.0, 1.0, 1.0};
  encoder_.theta = {10.0, 1.0};
  for (size_t i = 0; i < 5; ++i) model_.P[i][i] = kPrior;
  for (size_t i = 0; i < 2; ++i) encoder_.P[i][i] = kPrior;
  patch_ref_ = encoder_.theta[0];
}

void CostModel::set_encoder_cost(double ns_per_unit) {
  if (std::isfinite(ns_per_unit) && ns_per_unit > 0)
    encoder_.theta[0] = patch_ref_ = ns_per_unit * kPatchScale * 1e-6;
}

std::array<double, 5> CostModel::model_features(const StepFeatures& f) {
  return {1.0, f.prefill_tokens / kPrefillScale, f.decode_tokens / kDecodeScale,
          f.context_tokens / kContextScale, f.prefill_pairs / kPairScale};
}

std::array<double, 2> CostModel::encoder_features(const StepFeatures& f) {
  return {f.encoder_patches / kPatchScale, f.encoder_items / kItemScale};
}

double CostModel::encoder_ms(const StepFeatures& f) const {
  return std::max(0.0, encoder_.predict(encoder_features(f)));
}

double CostModel::predict_ns(const StepFeatures& f) const {
  return std::max(model_.predict(model_features(f)) + encoder_ms(f), kMinStepMs) * 1e6;
}

void CostModel::observe(const StepFeatures& f, double step_ns, double encoder_ns) {
  if (!std::isfinite(step_ns) || step_ns <= 0) return;
  const double step_ms = step_ns * 1e-6;
  const bool encodes = f.encoder_patches > 0 || f.encoder_items > 0;
  double enc_ms = 0;
  if (encodes) {
    if (std::isfinite(encoder_ns) && encoder_ns >= 0) {
      enc_ms = std::min(encoder_ns * 1e-6, step_ms);
      encoder_.update(encoder_features(f), enc_ms, forgetting_);
      // The encoder terms stay in bounds (a projection after the update): a run of tiny images,
      // whose steps barely excite the per-patch direction, cannot drive it to an absurd price.
      encoder_.theta[0] =
          std::clamp(encoder_.theta[0], patch_ref_ / kEncoderBand, patch_ref_ * kEncoderBand);
      encoder_.theta[1] = std::clamp(encoder_.theta[1], 0.0, kMaxItemMs);
    } else {
      enc_ms = std::min(encoder_ms(f), step_ms);
    }
  }
  model_.update(model_features(f), step_ms - enc_ms, forgetting_);
  ++n_obs_;
}

double CostModel::pair_ns() const {
  return std::max(0.0, model_.theta[4] * 1e6 / kPairScale);
}

double CostModel::encoder_item_ns() const {
  return encoder_.theta[1] * 1e6 / kItemScale;
}

std::array<double, 5> CostModel::coefficients_ns() const {
  return {model_.theta[0] * 1e6, model_.theta[1] * 1e6 / kPrefillScale,
          model_.theta[2] * 1e6 / kDecodeScale, encoder_.theta[0] * 1e6 / kPatchScale,
          model_.theta[3] * 1e6 / kContextScale};
}

double CostModel::predict_ttft_ns(double prefill_tokens, double patches,
                                  double queued_prefill_tokens, double queued_patches,
                                  int64_t n_decode, double context_tokens, int64_t budget,
                                  double items, double queued_items, double prompt_pairs) const {
  const double cap = std::max<double>(1.0, static_cast<double>(budget - n_decode));
  const double total = queued_prefill_tokens + prefill_tokens;
  const double steps = std::max(1.0, std::ceil(total / cap));
  StepFeatures full{std::min(cap, total), static_cast<double>(n_decode), 0, context_tokens};
  double t = steps * predict_ns(full);
  // The prompts' attention over their own tokens, on top of the steps' per-token cost.
  t += pair_ns() * std::max(0.0, prompt_pairs);
  // Encoder work on top of the steps.
  t += encoder_ms({0, 0, queued_patches + patches, 0, queued_items + items}) * 1e6;
  return t;
}

void CostModel::record_ttft(double predicted_ns, double actual_ns) {
  if (actual_ns <= 0) return;
  errors_.push_back((predicted_ns - actual_ns) / actual_ns);
}

PredictionError CostModel::ttft_error() const {
  PredictionError e;
  e.count = static_cast<int64_t>(errors_.size());
  if (errors_.empty()) return e;
  std::vector<double> a;
  double s = 0, sa = 0;
  for (double x : errors_) {
    a.push_back(std::fabs(x));
    s += x;
    sa += std::fabs(x);
  }
  std::sort(a.begin(), a.end());
  e.mean_abs_rel = sa / static_cast<double>(a.size());
  e.mean_signed_rel = s / static_cast<double>(a.size());
  e.p50_abs_rel = a[a.size() / 2];
  e.p90_abs_rel = a[std::min(a.size() - 1, a.size() * 9 / 10)];
  return e;
}

}  // namespace mmrt::engine
