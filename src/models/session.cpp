#include "models/session.h"

#include <algorithm>

#include "core/error.h"
#include "models/registry.h"

namespace mmrt::models {

kernels::KvCacheConfig kv_cache_config(const kernels::Backend& be, const Runner& runner,
                                       const KvOptions& o) {
  kernels::KvCacheConfig kc = runner.kv_config();
  kc.block_size = o.block_size;
  kc.dtype = o.dtype;
  if (o.blocks > 0) {
    kc.num_blocks = o.blocks;
    return kc;
  }
  const uint64_t per_block = std::max<uint64_t>(kernels::kv_bytes_per_block(kc), 1);
  uint64_t budget = o.bytes;
  if (o.device_fraction > 0 && !be.device().is_host()) {
    if (!(o.device_fraction <= 1.0))
      throw InvalidArgument("the KV cache's device memory fraction must be in (0, 1], got " +
                            std::to_string(o.device_fraction));
    const kernels::Backend::MemoryInfo m = be.memory();
    const uint64_t used = m.total > m.free ? m.total - m.free : 0;
    const auto allowed = static_cast<uint64_t>(o.device_fraction * static_cast<double>(m.total));
    auto gib = [](uint64_t b) { return std::to_string(static_cast<double>(b) / (1ull << 30)); };
    if (m.total == 0 || allowed < used + per_block)
      throw ResourceExhausted("no room for the KV cache on " + device_str(be.device()) + ": " +
                              gib(used) + " of " + gib(m.total) +
                              " GiB in use (the weights among it), and the memory fraction " +
                              std::to_string(o.device_fraction) + " allows " + gib(allowed) +
                              " GiB (raise --gpu-memory-fraction, or give --kv-mb)");
    budget = allowed - used;
  }
  kc.num_blocks = static_cast<int32_t>(
      std::min<uint64_t>(INT32_MAX, std::max<uint64_t>(1, budget / per_block)));
  return kc;
}

Session::Session(const kernels::Backend& be, Model model, const KvOptions& kv, int64_t min_blocks)
    : be_(be), model_(std::move(model)) {
  kernels::KvCacheConfig kc = kv_cache_config(be, *model_.runner, kv);
  if (min_blocks > INT32_MAX)
    throw InvalidArgument("the session's KV cache would need " + std::to_string(min_blocks) +
                          " blocks");
  kc.num_blocks =
      std::max<int32_t>(kc.num_blocks, static_cast<int32_t>(std::max<int64_t>(min_blocks, 0)));
  kv_ = std::make_unique<kernels::KvCache>(be, kc);
}

std::unique_ptr<Session> Session::load(const kernels::Backend& be, const std::string& dir,
                                       const LoadOptions& lo, const KvOptions& kv,
                                       int64_t min_blocks) {
  return std::make_unique<Session>(be, load_model(be, dir, lo), kv, min_blocks);
}

std::vector<int32_t> Session::block_table(int seq, int64_t tokens) const {
  const int64_t bs = block_size(), nb = (tokens + bs - 1) / bs;
  if (seq < 0 || tokens < 0 || (int64_t{seq} + 1) * nb > kv_->config().num_blocks)
    throw ResourceExhausted("sequence " + std::to_string(seq) + " of " + std::to_string(tokens) +
                            " tokens does not fit the KV cache of " +
                            std::to_string(kv_->config().num_blocks) + " blocks of " +
                            std::to_string(bs));
  std::vector<int32_t> b(static_cast<size_t>(nb));
  for (int64_t i = 0; i < nb; ++i) b[static_cast<size_t>(i)] = static_cast<int32_t>(seq * nb + i);
  return b;
}

Tensor Session::forward(std::span<const SeqStep> batch) {
  return model_.runner->forward(batch, *kv_);
}

Tensor Session::prefill(const Prompt& p, int64_t chunk, std::span<const int32_t> block_table) {
  const auto S = static_cast<int64_t>(p.ids.size());
  if (S < 1 || chunk < 1) throw InvalidArgument("prefill: an empty prompt or chunk");
  if (!p.positions.empty() && p.positions.size() != static_cast<size_t>(S * p.position_rows))
    throw InvalidArgument("prefill: positions are not [position_rows, S]");
  if (!p.media_rows.empty() &&
      (!p.media || p.media->rank() != 2 || p.media->dim(0) < int64_t(p.media_rows.size())))
    throw InvalidArgument("prefill: media rows without as many media embeddings");
  const int64_t H = p.media ? p.media->dim(1) : 0;
  Tensor logits;
  std::vector<int32_t> pos, local;
  for (int64_t done = 0; done < S;) {
    const int64_t n = std::min<int64_t>(chunk, S - done);
    pos.clear();
    local.clear();
    if (!p.positions.empty())
      for (int c = 0; c < p.position_rows; ++c)
        for (int64_t i = 0; i < n; ++i) pos.push_back(p.positions[size_t(c * S + done + i)]);
    int64_t first = -1;
    for (size_t j = 0; j < p.media_rows.size(); ++j)
      if (p.media_rows[j] >= done && p.media_rows[j] < done + n) {
        if (first < 0) first = static_cast<int64_t>(j);
        local.push_back(p.media_rows[j] - static_cast<int32_t>(done));
      }
    SeqStep s;
    s.tokens = p.ids.subspan(static_cast<size_t>(done), static_cast<size_t>(n));
    s.positions = pos;
    s.kv_before = static_cast<int32_t>(done);
    s.block_table = block_table;
    s.embed_rows = local;
    s.embeds = first >= 0 ? p.media->data<float>() + first * H : nullptr;
    s.want_logits = done + n == S;
    logits = forward({&s, 1});
    done += n;
  }
  return be_.to_host(logits).clone();
}

Tensor Session::decode(int32_t token, int64_t kv_before, int32_t rope_delta,
                       std::span<const int32_t> block_table) {
  SeqStep s;
  s.tokens = {&token, 1};
  s.rope_delta = rope_delta;
  s.kv_before = static_cast<int32_t>(kv_before);
  s.block_table = block_table;
  return be_.to_host(forward({&s, 1})).clone();
}

}  // namespace mmrt::models
