#include "engine/step_graphs.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/error.h"

namespace mmrt::engine {

StepGraphs::StepGraphs(const kernels::Backend& be, models::Runner& runner, kernels::KvCache& kv,
                       const StepGraphOptions& o)
    : be_(be), runner_(runner), kv_(kv), opt_(o) {
  if (o.max_rows < 0 || o.max_rows > 4096)
    throw InvalidArgument("step graphs: decode rows must be in [0, 4096], got " +
                          std::to_string(o.max_rows));
  if (o.max_context < 1) throw InvalidArgument("step graphs: max_context must be >= 1");
  const int32_t bs = kv.config().block_size;
  dummy_tokens_.assign(1, 0);
  dummy_table_.assign(static_cast<size_t>((std::max(o.max_context, o.warm_tokens) + bs - 1) / bs),
                      0);
}

StepGraphs::~StepGraphs() = default;

std::vector<models::SeqStep> StepGraphs::dummy_decode(int32_t rows) {
  const int32_t bs = kv_.config().block_size;
  models::SeqStep s;
  s.tokens = std::span<const int32_t>(dummy_tokens_.data(), 1);
  s.kv_before = opt_.max_context - 1;
  s.block_table = std::span<const int32_t>(dummy_table_.data(),
                                           static_cast<size_t>((opt_.max_context + bs - 1) / bs));
  return std::vector<models::SeqStep>(static_cast<size_t>(rows), s);
}

std::string StepGraphs::capture() {
  graphs_.clear();
  stats_ = {};
  if (opt_.max_rows == 0) return "step graphs: off (--step-graphs 0)";
  if (!be_.records_step_graphs())
    return "step graphs: off (" + device_str(be_.device()) + " records none)";
  try {
    return capture_all();
  } catch (const Error& e) {  // e.g. no memory for the graphs' buffers: every step eager
    graphs_.clear();
    stats_ = {};
    return std::string("step graphs: off (") + e.what() + ")";
  }
}

std::string StepGraphs::capture_all() {
  const auto t0 = std::chrono::steady_clock::now();
  // The largest shapes first, eagerly: a prefill of the step budget and the most sequences,
  // then every decode size from the largest down on the graphs' buffers (the KV cache holds no
  // sequence yet; block 0 takes the writes).
  if (opt_.warm_tokens > 0) {
    std::vector<int32_t> prompt(static_cast<size_t>(opt_.warm_tokens), 0);
    models::SeqStep s;
    s.tokens = prompt;
    s.block_table = dummy_table_;
    runner_.forward(std::span<const models::SeqStep>(&s, 1), kv_);
  }
  runner_.forward(dummy_decode(std::max(opt_.max_rows, opt_.warm_rows)), kv_);
  for (int32_t rows = opt_.max_rows; rows >= 1; --rows) {
    const std::vector<models::SeqStep> steps = dummy_decode(rows);
    be_.size_step([&] { runner_.forward(steps, kv_); });
  }
  be_.synchronize();
  std::string why;
  graphs_.resize(static_cast<size_t>(opt_.max_rows));
  int32_t first_missing = 0;
  for (int32_t rows = 1; rows <= opt_.max_rows; ++rows) {
    const std::vector<models::SeqStep> steps = dummy_decode(rows);
    auto g = be_.capture_step([&] { runner_.forward(steps, kv_); }, &why);
    if (!g) {
      first_missing = rows;
      break;
    }
    graphs_[static_cast<size_t>(rows - 1)] = std::move(g);
    ++stats_.captured;
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "step graphs: %lld captured (decode rows 1-%lld, contexts to %d) in %.0f ms",
                static_cast<long long>(stats_.captured), static_cast<long long>(stats_.captured),
                opt_.max_context, ms);
  std::string line = buf;
  if (first_missing > 0)
    line += "; not for " + std::to_string(first_missing) + " rows and more: " + why;
  return line;
}

Tensor StepGraphs::forward(std::span<const models::SeqStep> batch) {
  const size_t n = batch.size();
  bool decode = n >= 1 && n <= graphs_.size() && graphs_[n - 1];
  for (const models::SeqStep& s : batch)
    decode = decode && s.tokens.size() == 1 && s.embed_rows.empty() && s.want_logits;
  if (!decode) return runner_.forward(batch, kv_);
  Tensor out;
  const auto t0 = std::chrono::steady_clock::now();
  if (be_.replay_step(*graphs_[n - 1], [&] { out = runner_.forward(batch, kv_); })) {
    ++stats_.replayed;
    stats_.replay_host_ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    return out;
  }
  ++stats_.eager;
  return runner_.forward(batch, kv_);
}

std::string step_graphs_text(const std::string& capture_line, const StepGraphs::Stats& s) {
  return capture_line + "; decode steps replayed " + std::to_string(s.replayed) + ", eager " +
         std::to_string(s.eager);
}

}  // namespace mmrt::engine
