// Dispatchers of the sampling ops, with the argument checks every device shares.
#include "kernels/sampling.h"

#include <string>

#include "core/error.h"

namespace mmrt::kernels {

namespace {

void check_rows(const char* fn, const float* x, int64_t n_rows, int64_t stride, int64_t vocab) {
  if (n_rows < 0 || vocab < 1 || stride < vocab)
    throw InvalidArgument(std::string(fn) + ": bad shape: " + std::to_string(n_rows) + " rows of " +
                          std::to_string(vocab) + " logits, stride " + std::to_string(stride));
  if (!x && n_rows > 0) throw InvalidArgument(std::string(fn) + ": null logits");
}

void check_row(const char* fn, int32_t row, int64_t n_rows) {
  if (row < 0 || row >= n_rows)
    throw InvalidArgument(std::string(fn) + ": row " + std::to_string(row) + " outside the " +
                          std::to_string(n_rows) + " rows");
}

}  // namespace

void edit_logits(const Backend& be, float* x, int64_t n_rows, int64_t stride, int64_t vocab,
                 std::span<const LogitEdit> edits) {
  check_rows("edit_logits", x, n_rows, stride, vocab);
  for (const LogitEdit& e : edits) {
    check_row("edit_logits", e.row, n_rows);
    if (e.token < 0 || e.token >= vocab)
      throw InvalidArgument("edit_logits: token " + std::to_string(e.token) +
                            " outside the vocabulary of " + std::to_string(vocab));
  }
  if (edits.empty()) return;
  detail::entry(be, be.ops().sampling, &SamplingOps::edit_logits, Op::kEditLogits)(be, x, stride,
                                                                                   edits);
}

void argmax_rows(const Backend& be, const float* x, int64_t n_rows, int64_t stride, int64_t vocab,
                 std::span<const int32_t> rows, int32_t* out) {
  check_rows("argmax_rows", x, n_rows, stride, vocab);
  for (int32_t r : rows) check_row("argmax_rows", r, n_rows);
  if (rows.empty()) return;
  if (!out) throw InvalidArgument("argmax_rows: null output");
  detail::entry(be, be.ops().sampling, &SamplingOps::argmax_rows, Op::kArgmaxRows)(
      be, x, stride, vocab, rows, out);
}

void top_k_rows(const Backend& be, const float* x, int64_t n_rows, int64_t stride, int64_t vocab,
                std::span<const TopKRow> rows, std::pair<float, int32_t>* out) {
  check_rows("top_k_rows", x, n_rows, stride, vocab);
  for (const TopKRow& r : rows) {
    check_row("top_k_rows", r.row, n_rows);
    if (r.k < 1 || r.k > vocab || r.k > kMaxDeviceTopK)
      throw InvalidArgument("top_k_rows: k " + std::to_string(r.k) + " outside 1.." +
                            std::to_string(vocab < kMaxDeviceTopK ? vocab : kMaxDeviceTopK));
    if (!(r.temperature > 0.0f))
      throw InvalidArgument("top_k_rows: temperature must be > 0, got " +
                            std::to_string(r.temperature));
  }
  if (rows.empty()) return;
  if (!out) throw InvalidArgument("top_k_rows: null output");
  detail::entry(be, be.ops().sampling, &SamplingOps::top_k_rows, Op::kTopKRows)(be, x, stride,
                                                                                vocab, rows, out);
}

}  // namespace mmrt::kernels
