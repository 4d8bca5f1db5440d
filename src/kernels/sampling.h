// The device's part of drawing tokens (an op family: SamplingOps): a step's logits stay where the
// model computed them, and only what a draw needs comes to the host — a greedy row's token id, a
// top-k row's k candidates — instead of the vocabulary-wide row (151,936 floats for Qwen2). The
// penalties edit the logits first, on the device. Logits are memory of the backend's device, rows
// `stride` floats apart; row lists, edits and outputs are host memory. Every device gives the
// same bits (no reduction of values: comparisons and one rounding each), so a draw is the same on
// every device (engine/sampler.h). A NaN is largest for argmax_rows (as argmax()); where a top-k
// row holds a NaN its place among the candidates is unspecified (the CPU's sort has no order
// for it either).
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "kernels/backend.h"

namespace mmrt::kernels {

// One change to one logit before a draw: x[row][token] becomes edit_logit(x, e). At most one edit
// per (row, token) in a call.
struct LogitEdit {
  int32_t row = 0, token = 0;
  float scale = 1.0f;     // the repetition penalty (1: none): l > 0 ? l / scale : l * scale
  float subtract = 0.0f;  // presence + frequency x count, subtracted after the scale
};
// The edit's arithmetic, every rounding of it (devices must not fuse the multiply and subtract).
inline float edit_logit(float l, const LogitEdit& e) {
  if (e.scale != 1.0f) l = l > 0 ? l / e.scale : l * e.scale;
  return l - e.subtract;
}

// Applies `edits` to x ([n_rows, vocab], rows `stride` floats apart) in place. InvalidArgument for
// an edit outside the rows or the vocabulary.
void edit_logits(const Backend& be, float* x, int64_t n_rows, int64_t stride, int64_t vocab,
                 std::span<const LogitEdit> edits);

// out[i] = argmax of row rows[i] < n_rows of x (its first `vocab` floats), with argmax()'s ties
// (the first) and NaN (largest). out: host memory of rows.size() ids.
void argmax_rows(const Backend& be, const float* x, int64_t n_rows, int64_t stride, int64_t vocab,
                 std::span<const int32_t> rows, int32_t* out);

// A top-k row: the k best of row `row` after dividing each logit by `temperature` (> 0).
struct TopKRow {
  int32_t row = 0, k = 1;
  float temperature = 1.0f;
};
// The most a top-k row may ask for (larger: draw from the whole row on the host).
constexpr int32_t kMaxDeviceTopK = 1024;
// For each of `rows` (row < n_rows, 1 <= k <= min(vocab, kMaxDeviceTopK)), its k best
// (x / temperature, id) pairs, best first (equal values: the lower id first), one row after the
// other in `out` (host memory of the k's sum).
void top_k_rows(const Backend& be, const float* x, int64_t n_rows, int64_t stride, int64_t vocab,
                std::span<const TopKRow> rows, std::pair<float, int32_t>* out);

// A device's sampling kernels (arguments as above; the dispatchers have checked them).
struct SamplingOps {
  void (*edit_logits)(const Backend&, float* x, int64_t stride, std::span<const LogitEdit> edits);
  void (*argmax_rows)(const Backend&, const float* x, int64_t stride, int64_t vocab,
                      std::span<const int32_t> rows, int32_t* out);
  void (*top_k_rows)(const Backend&, const float* x, int64_t stride, int64_t vocab,
                     std::span<const TopKRow> rows, std::pair<float, int32_t>* out);
};

}  // namespace mmrt::kernels
