#include "engine/cost_model.h"

#include <algorithm>
#include <cmath>

namespace mmrt::engine {

namespace {
// Feature scales keep the regression well conditioned (values of order 1).
constexpr std::array<double, 6> kScale{1.0, 100.0, 10.0, 1000.0, 10000.0, 1.0};
constexpr double kPrior = 100.0;                    // initial covariance per coefficient
constexpr double kMaxCovarianceTrace = 6 * kPrior;  // anti-windup bound
constexpr double kMinStepMs = 0.1;                  // no step is predicted faster
}  // namespace

CostModel::CostModel(double forgetting) : forgetting_(forgetting) {
  // Prior (ms per scaled unit): 2 ms per step, 5 ms per 100 prefill tokens, 1 ms per 10
  // decodes, 10 ms per 1000 patches, 1 ms per 10k context tokens, 1 ms per encoder item.
  theta_ = {2.0, 5.0, 1.0, 10.0, 1.0, 1.0};
  patch_ref_ = theta_[3];
  for (auto& row : P_) row.fill(0.0);
  for (size_t i = 0; i < kN; ++i) P_[i][i] = kPrior;
}

void CostModel::set_encoder_cost(double ns_per_unit) {
  if (std::isfinite(ns_per_unit) && ns_per_unit > 0)
    theta_[3] = patch_ref_ = ns_per_unit * kScale[3] * 1e-6;
}

std::array<double, CostModel::kN> CostModel::features(const StepFeatures& f) {
  return {1.0,
          f.prefill_tokens / kScale[1],
          f.decode_tokens / kScale[2],
          f.encoder_patches / kScale[3],
          f.context_tokens / kScale[4],
          f.encoder_items / kScale[5]};
}

double CostModel::predict_ns(const StepFeatures& f) const {
  auto x = features(f);
  double ms = 0;
  for (size_t i = 0; i < kN; ++i) ms += theta_[i] * x[i];
  return std::max(ms, kMinStepMs) * 1e6;
}

void CostModel::observe(const StepFeatures& f, double step_ns) {
  auto x = features(f);
  double y = step_ns * 1e-6;
  std::array<double, kN> Px{};
  for (size_t i = 0; i < kN; ++i)
    for (size_t j = 0; j < kN; ++j) Px[i] += P_[i][j] * x[j];
  double denom = forgetting_;
  for (size_t i = 0; i < kN; ++i) denom += x[i] * Px[i];
  double pred = 0;
  for (size_t i = 0; i < kN; ++i) pred += theta_[i] * x[i];
  // No coefficient is clamped: over collinear features (decode count and context grow together
  // in a latency-bound engine) the fit may put a negative cost on one feature and offset it on
  // another, which is right on the steps the engine runs; clamping the negative part at
  // prediction broke that compensation and over-predicted those steps 4-5x
  // (tests: CostModel.StaysAccurateOnCollinearNoisySteps). Predictions are clamped instead.
  for (size_t i = 0; i < kN; ++i) theta_[i] += Px[i] / denom * (y - pred);
  // The encoder terms stay in bounds (a projection after the update): a run of tiny images,
  // whose steps barely excite the per-patch direction, cannot drive it to an absurd price.
  theta_[3] = std::clamp(theta_[3], patch_ref_ / kEncoderBand, patch_ref_ * kEncoderBand);
  theta_[5] = std::clamp(theta_[5], 0.0, kMaxItemMs);
  for (size_t i = 0; i < kN; ++i)
    for (size_t j = 0; j < kN; ++j) P_[i][j] = (P_[i][j] - Px[i] * Px[j] / denom) / forgetting_;
  // Anti-windup: forgetting inflates P by 1/forgetting per step in directions the steps do not
  // excite; bounded at the prior's size, one unusual step cannot swing the fit.
  double trace = 0;
  for (size_t i = 0; i < kN; ++i) trace += P_[i][i];
  if (trace > kMaxCovarianceTrace)
    for (auto& row : P_)
      for (double& v : row) v *= kMaxCovarianceTrace / trace;
  ++n_obs_;
}

double CostModel::encoder_item_ns() const {
  return theta_[5] * 1e6 / kScale[5];
}

std::array<double, 5> CostModel::coefficients_ns() const {
  std::array<double, 5> c{};
  for (size_t i = 0; i < 5; ++i) c[i] = theta_[i] * 1e6 / kScale[i];
  return c;
}

double CostModel::predict_ttft_ns(double prefill_tokens, double patches,
                                  double queued_prefill_tokens, double queued_patches,
                                  int64_t n_decode, double context_tokens, int64_t budget,
                                  double items, double queued_items) const {
  const double cap = std::max<double>(1.0, static_cast<double>(budget - n_decode));
  const double total = queued_prefill_tokens + prefill_tokens;
  const double steps = std::max(1.0, std::ceil(total / cap));
  StepFeatures full{std::min(cap, total), static_cast<double>(n_decode), 0, context_tokens};
  double t = steps * predict_ns(full);
  StepFeatures enc{0, 0, queued_patches + patches, 0, queued_items + items};
  // Encoder work on top of the steps (never negative: coefficients are fitted unconstrained).
  t += std::max(0.0, predict_ns(enc) - predict_ns({}));
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
