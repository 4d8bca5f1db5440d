// Log-probabilities from logits, and the comparisons the benchmarks report between two runs'
// distributions (the benches that change how a model computes and measure what it costs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mmrt::cli {

// log_softmax of n logits, in double.
std::vector<double> log_softmax(const float* x, int64_t n);
// Index of the largest value.
size_t argmax(const std::vector<double>& v);
// KL(p || q) in nats from log-probabilities (0 when equal; never negative).
double kl(const std::vector<double>& lp, const std::vector<double>& lq);

}  // namespace mmrt::cli
