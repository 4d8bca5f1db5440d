// A stand-in for the model executor in scheduler tests. It owns memory as the real executor
// does, and reads only the plan: a fake KV store (one 64-bit value per cache slot) written
// through the plan's block tables, and an encoder store filled by the plan's jobs and freed by
// its evictions. It "samples" the next token as a hash of everything it reads back through the
// block table. So a wrong block table, a bad prefix-cache hit, a missing or evicted encoder
// output changes the tokens (or throws), and a correct schedule gives the same tokens however
// it is chunked or preempted.
#pragma once

#include <gtest/gtest.h>

#include <unordered_map>
#include <vector>

#include "core/hash.h"
#include "engine/encoder_cache.h"
#include "engine/kv_manager.h"
#include "engine/scheduler.h"
#include "kernels/cpu/cpu_backend.h"

namespace mmrt::engine::testing {

constexpr int64_t kFakeWidth = 4;  // columns of the fake encoder rows

class FakeExecutor {
 public:
  explicit FakeExecutor(KvBlockManager& kv, int32_t vocab = 1000)
      : bs_(kv.block_size()),
        vocab_(vocab),
        slots_(static_cast<size_t>(kv.num_blocks()) * kv.block_size(), 0) {}

  // Fake encoder output: one row per item token, derived from its key.
  static Tensor features(const Hash128& key, int64_t n_tokens) {
    Tensor t = Tensor::empty(DType::kF32, {n_tokens, kFakeWidth});
    for (int64_t i = 0; i < n_tokens; ++i)
      for (int64_t j = 0; j < kFakeWidth; ++j)
        t.data<float>()[i * kFakeWidth + j] =
            static_cast<float>((key.lo >> (j * 8)) & 0xff) + static_cast<float>(i);
    return t;
  }

  StepOutput execute(const StepPlan& plan) {
    StepOutput out;
    for (const Hash128& k : plan.encoder_frees) store_.erase(k);
    for (const Hash128& k : plan.encoder_drops) partial_.erase(k);
    std::unordered_map<Hash128, Tensor, Hash128Hasher> step_only;
    for (const auto& job : plan.encoder_jobs) {
      ++encoder_runs;
      if (job.parts > 1) {  // an item in parts: in order, each once, the output after the last
        EXPECT_TRUE(job.part_begin < job.part_end && job.part_end <= job.parts);
        int64_t& done = partial_[job.key];
        EXPECT_EQ(done, job.part_begin) << "parts out of order, or a dropped encode resumed";
        done = job.part_end;
        if (!job.last()) {
          out.encoder.push_back({1, 2});
          continue;
        }
        partial_.erase(job.key);
      }
      Tensor f = features(job.key, job.input.n_tokens);
      if (job.keep)
        store_.put(job.key, f);
      else
        step_only.emplace(job.key, f);
      out.encoder.push_back({1, 2});
    }
    for (const auto& c : plan.chunks) {
      EXPECT_EQ(static_cast<int64_t>(c.tokens.size()), c.n);
      for (int64_t i = 0; i < c.n; ++i) {
        const int64_t pos = c.start + i;
        const int32_t block = c.block_table.at(static_cast<size_t>(pos / bs_));
        slots_[static_cast<size_t>(block) * bs_ + static_cast<size_t>(pos % bs_)] =
            value_of(c, i, step_only);
      }
      if (!c.sample) continue;
      Hasher h;
      for (int64_t i = 0; i < c.start + c.n; ++i) {
        const int32_t block = c.block_table.at(static_cast<size_t>(i / bs_));
        h.update_pod(slots_[static_cast<size_t>(block) * bs_ + static_cast<size_t>(i % bs_)]);
      }
      out.sampled.push_back(static_cast<int32_t>(h.digest().lo % static_cast<uint64_t>(vocab_)));
    }
    return out;
  }

  int64_t encoder_runs = 0;
  const EncoderStore& store() const { return store_; }
  size_t partial_encodes() const { return partial_.size(); }

 private:
  // What the "KV" of the chunk's token i is: its id, or for a media token the fake feature row
  // (read from the encoder store, which must hold it, or this step's own output).
  uint64_t value_of(const ScheduledChunk& c, int64_t i,
                    const std::unordered_map<Hash128, Tensor, Hash128Hasher>& step_only) const {
    const int64_t pos = c.start + i;
    for (const ChunkMedia& m : c.media) {
      if (i < m.chunk_row || i >= m.chunk_row + m.n) continue;
      float row[kFakeWidth];
      const int64_t item_row = m.item_row + (i - m.chunk_row);
      auto it = step_only.find(m.key);
      if (it != step_only.end())
        std::copy_n(it->second.data<float>() + item_row * kFakeWidth, kFakeWidth, row);
      else
        store_.read_rows(m.key, item_row, 1, row);
      return hash128(row, sizeof row).lo ^ (static_cast<uint64_t>(pos) << 40);
    }
    return static_cast<uint64_t>(c.tokens[static_cast<size_t>(i)]) * 0x9e3779b97f4a7c15ull ^
           static_cast<uint64_t>(pos);
  }

  int64_t bs_;
  int32_t vocab_;
  std::vector<uint64_t> slots_;
  kernels::CpuBackend be_{kernels::BackendOptions{.threads = 1}};
  EncoderStore store_{be_};
  std::unordered_map<Hash128, int64_t, Hash128Hasher> partial_;  // parts run of items in parts
};

}  // namespace mmrt::engine::testing
