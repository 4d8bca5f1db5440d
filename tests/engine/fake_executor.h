// A stand-in for the model executor in scheduler tests. It keeps a fake KV store (one 64-bit
// value per cache slot) written through the block tables exactly as the real executor writes
// K/V, and "samples" the next token as a hash of everything it reads back through the block
// table. So a wrong block table, a bad prefix-cache hit or a missing encoder output changes the
// tokens — and a correct schedule gives the same tokens however it is chunked or preempted.
#pragma once

#include <gtest/gtest.h>

#include <unordered_map>
#include <vector>

#include "core/hash.h"
#include "engine/encoder_cache.h"
#include "engine/kv_manager.h"
#include "engine/scheduler.h"

namespace mmrt::engine::testing {

class FakeExecutor {
 public:
  FakeExecutor(KvBlockManager& kv, EncoderCache& enc, int32_t vocab = 1000)
      : kv_(kv), enc_(enc), vocab_(vocab), slots_(static_cast<size_t>(kv.num_blocks()) * kv.block_size(), 0) {}

  // Fake vision features: one row per image token, derived from the media key.
  static Tensor features(const MediaItem& m) {
    Tensor t = Tensor::empty(DType::kF32, {m.n_tokens, 4});
    for (int64_t i = 0; i < m.n_tokens; ++i)
      for (int64_t j = 0; j < 4; ++j)
        t.data<float>()[i * 4 + j] = static_cast<float>((m.key.lo >> (j * 8)) & 0xff) + static_cast<float>(i);
    return t;
  }

  StepOutput execute(const StepPlan& plan) {
    StepOutput out;
    for (const auto& job : plan.encoder_jobs) {
      const MediaItem& m = job.req->media[job.media];
      ++encoder_runs;
      enc_.put(m.key, features(m));
    }
    const int32_t bs = kv_.block_size();
    for (const auto& c : plan.chunks) {
      const auto& table = kv_.block_table(*c.req);
      for (int64_t i = c.start; i < c.start + c.n; ++i) {
        int32_t block = table.at(static_cast<size_t>(i / bs));
        slots_[static_cast<size_t>(block) * bs + static_cast<size_t>(i % bs)] = value_of(*c.req, i);
      }
      if (!c.sample) continue;
      Hasher h;
      for (int64_t i = 0; i < c.start + c.n; ++i) {
        int32_t block = table.at(static_cast<size_t>(i / bs));
        h.update_pod(slots_[static_cast<size_t>(block) * bs + static_cast<size_t>(i % bs)]);
      }
      out.sampled.push_back(static_cast<int32_t>(h.digest().lo % static_cast<uint64_t>(vocab_)));
    }
    return out;
  }

  int64_t encoder_runs = 0;

 private:
  // What the "KV" of token i is: its id, or for an image token the fake feature row (read from
  // the encoder cache, which must hold it).
  uint64_t value_of(const Request& r, int64_t i) {
    for (const auto& m : r.media) {
      if (i >= m.begin && i < m.begin + m.n_tokens) {
        float row[4];
        enc_.read_rows(m.key, i - m.begin, 1, row);
        return hash128(row, sizeof row).lo ^ (static_cast<uint64_t>(i) << 40);
      }
    }
    return static_cast<uint64_t>(r.token_at(i)) * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(i);
  }

  KvBlockManager& kv_;
  EncoderCache& enc_;
  int32_t vocab_;
  std::vector<uint64_t> slots_;
};

}  // namespace mmrt::engine::testing
