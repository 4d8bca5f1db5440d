#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/sampling.h"

namespace mmrt::engine {

void SamplingParams::validate() const {
  if (logprobs < -1 || logprobs > 20)
    throw InvalidArgument("logprobs must be -1 (none) or 0..20 alternatives, got " +
                          std::to_string(logprobs));
  auto bad = [](const std::string& m) { throw InvalidArgument("sampling parameters: " + m); };
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    bad("temperature must be a finite number >= 0");
  if (top_k < 0) bad("top_k must be >= 0 (0 disables it)");
  if (!(top_p > 0.0f && top_p <= 1.0f)) bad("top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) bad("min_p must be in [0, 1]");
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    bad("repetition_penalty must be > 0");
  if (!std::isfinite(presence_penalty) || !std::isfinite(frequency_penalty))
    bad("presence_penalty and frequency_penalty must be finite");
  if (max_tokens < 1) bad("max_tokens must be >= 1");
  for (const auto& s : stop)
    if (s.empty()) bad("stop strings must not be empty");
}

SamplerSettings SamplingParams::sampler() const {
  return {temperature,       top_k, top_p, min_p, repetition_penalty, presence_penalty,
          frequency_penalty, seed};
}

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// The first NaN, else the first largest: kernels::argmax's rule (and the devices' argmax_rows),
// here in scalar code so that this file needs no kernel library.
size_t first_argmax(std::span<const float> v) {
  size_t best = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) return i;
    if (v[i] > v[best]) best = i;
  }
  return best;
}

}  // namespace

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int k) {
  double mx = -std::numeric_limits<double>::infinity();
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  TokenLogprobs t;
  t.token = token;
  t.logprob = static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) - lse);
  k = std::clamp(k, 0, static_cast<int>(logits.size()));
  if (k == 0) return t;
  // The k best in one pass through a heap of k (worst on top): no vocabulary-sized buffer.
  using Entry = std::pair<float, int32_t>;
  auto better = [](const Entry& a, const Entry& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::vector<Entry> heap;
  heap.reserve(static_cast<size_t>(k));
  for (size_t i = 0; i < logits.size(); ++i) {
    const Entry e{logits[i], static_cast<int32_t>(i)};
    if (heap.size() < static_cast<size_t>(k)) {
      heap.push_back(e);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(e, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = e;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort(heap.begin(), heap.end(), better);
  for (const auto& [v, id] : heap)
    t.top.emplace_back(id, static_cast<float>(static_cast<double>(v) - lse));
  return t;
}

void penalty_edits(const SamplerSettings& p, int32_t row, int64_t vocab,
                   std::span<const int32_t> prompt, std::span<const int32_t> output,
                   std::vector<kernels::LogitEdit>& edits) {
  const bool rep = p.repetition_penalty != 1.0f;
  const bool sub = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (!rep && !sub) return;
  // (token, 0 for a prompt token / 1 for an output token), sorted: each token's run says whether
  // it was seen and how often it was generated.
  std::vector<std::pair<int32_t, int>> seen;
  seen.reserve((rep ? prompt.size() : 0) + output.size());
  if (rep)
    for (int32_t t : prompt) seen.emplace_back(t, 0);
  for (int32_t t : output) seen.emplace_back(t, 1);
  std::sort(seen.begin(), seen.end());
  for (size_t i = 0; i < seen.size();) {
    size_t j = i, generated = 0;
    for (; j < seen.size() && seen[j].first == seen[i].first; ++j) generated += seen[j].second;
    const int32_t t = seen[i].first;
    if (t >= 0 && t < vocab) {
      kernels::LogitEdit e{.row = row, .token = t};
      if (rep) e.scale = p.repetition_penalty;
      if (sub && generated > 0)
        e.subtract = p.presence_penalty + p.frequency_penalty * static_cast<float>(generated);
      if (e.scale != 1.0f || e.subtract != 0.0f) edits.push_back(e);
    }
    i = j;
  }
}

int32_t draw_candidate(std::span<const std::pair<float, int32_t>> sorted, const SamplerSettings& p,
                       uint64_t draw) {
  if (sorted.empty()) throw InvalidArgument("sampling: no candidates");
  // Softmax over the kept candidates (double for a stable sum).
  double mx = sorted[0].first, sum = 0;
  std::vector<double> prob(sorted.size());
  for (size_t i = 0; i < sorted.size(); ++i) sum += prob[i] = std::exp(sorted[i].first - mx);
  for (auto& q : prob) q /= sum;
  // min-p: relative to the most likely token.
  if (p.min_p > 0.0f) {
    double thr = p.min_p * prob[0];
    size_t n = 1;
    while (n < prob.size() && prob[n] >= thr) ++n;
    prob.resize(n);
  }
  // top-p: the smallest prefix whose mass reaches top_p.
  if (p.top_p < 1.0f) {
    double total = 0;
    for (double q : prob) total += q;
    double cum = 0;
    size_t n = 0;
    while (n < prob.size()) {
      cum += prob[n++] / total;
      if (cum >= p.top_p) break;
    }
    prob.resize(n);
  }
  double total = 0;
  for (double q : prob) total += q;
  // The draw's own stream: 53 random bits from (seed, draw).
  const uint64_t bits = splitmix64(splitmix64(p.seed) ^ (draw * 0xD1B54A32D192ED03ull + 1));
  double r = static_cast<double>(bits >> 11) * 0x1.0p-53 * total;
  size_t pick = prob.size() - 1;
  for (size_t i = 0; i < prob.size(); ++i) {
    if (r < prob[i]) {
      pick = i;
      break;
    }
    r -= prob[i];
  }
  return sorted[pick].second;
}

int32_t sample_edited(std::span<const float> logits, const SamplerSettings& p, uint64_t draw,
                      std::vector<std::pair<float, int32_t>>& scratch) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (V < 1) throw InvalidArgument("sampling: empty logits");
  if (p.temperature == 0.0f) return static_cast<int32_t>(first_argmax(logits));
  // Candidates sorted by logit / temperature (descending; equal values: the lower id first);
  // top-k cuts the list first.
  scratch.clear();
  scratch.reserve(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i)
    scratch.emplace_back(logits[static_cast<size_t>(i)] / p.temperature, static_cast<int32_t>(i));
  size_t keep = scratch.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) keep = static_cast<size_t>(p.top_k);
  auto desc = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (keep < scratch.size()) {
    std::partial_sort(scratch.begin(), scratch.begin() + static_cast<long>(keep), scratch.end(),
                      desc);
    scratch.resize(keep);
  } else {
    std::sort(scratch.begin(), scratch.end(), desc);
  }
  return draw_candidate(scratch, p, draw);
}

int32_t sample_token(std::span<float> logits, const SamplerSettings& p, uint64_t draw,
                     std::span<const int32_t> prompt, std::span<const int32_t> output,
                     std::vector<std::pair<float, int32_t>>& scratch) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (V < 1) throw InvalidArgument("sampling: empty logits");
  std::vector<kernels::LogitEdit> edits;
  penalty_edits(p, 0, V, prompt, output, edits);
  for (const kernels::LogitEdit& e : edits) {
    float& l = logits[static_cast<size_t>(e.token)];
    l = kernels::edit_logit(l, e);
  }
  return sample_edited(logits, p, draw, scratch);
}

Sampler::Sampler(const SamplingParams& params) : s_(params.sampler()) {
  params.validate();
}

void Sampler::accept(int32_t token) {
  output_.push_back(token);
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> prompt) {
  const int32_t t = sample_token(logits, s_, output_.size(), prompt, output_, scratch_);
  accept(t);
  return t;
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

std::string StopStringMatcher::push(const std::string& text) {
  if (finished_) return {};
  held_ += text;
  // Earliest complete stop string wins.
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    size_t pos = held_.find(s);
    if (pos < first) first = pos;
  }
  if (first != std::string::npos) {
    finished_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > hold; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopStringMatcher::flush() {
  std::string out;
  out.swap(held_);
  return finished_ ? std::string() : out;
}

}  // namespace mmrt::engine
