// Encoder outputs kept across requests, split as the rest of the engine is: the scheduler keeps
// the books (EncoderCache: which keys are resident, their sizes, LRU order, pins, hit counts;
// eviction decisions travel to the executor in the step plan), the executor owns the memory
// (EncoderStore: the embeddings themselves, in f16). Keys hash the media bytes, the model, the
// preprocessing settings and the tenant's salt, so tenants never share entries.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <vector>

#include "core/hash.h"
#include "core/tensor.h"
#include "kernels/backend.h"

namespace mmrt::engine {

struct EncoderCacheStats {
  int64_t hits = 0, misses = 0, evictions = 0, rejected = 0;
};

// What the encoder cache holds, told to a listener as it changes (e.g. published to a cluster's
// router): `media` hashes the item's file alone (no tenant, model or settings: what a router can
// compute from a request), stored when the first entry of that file arrives, removed when the
// last one goes. Called on the step loop: it must not block.
using MediaCacheListener = std::function<void(bool stored, const Hash128& media)>;

class EncoderCache {
 public:
  explicit EncoderCache(uint64_t byte_budget, MediaCacheListener listener = nullptr);

  bool contains(const Hash128& key) const { return map_.count(key) > 0; }
  // Counts a hit or a miss (for the hit rate) and returns contains(key).
  bool lookup(const Hash128& key);
  // Makes room for an entry of `bytes` by evicting unpinned entries, least recently used first
  // (their keys are appended to `evicted`: the executor frees them), and records it. A
  // transaction: when it cannot fit even then, nothing changes and it returns false.
  // `media`: the item's file hash for the listener (zero: none).
  bool reserve(const Hash128& key, uint64_t bytes, std::vector<Hash128>& evicted,
               const Hash128& media = {});
  void touch(const Hash128& key);  // most recently used (no-op for an absent key)
  void erase(const Hash128& key);  // forgets an unpinned entry (a failed step's reservation)
  void record_miss() { ++stats_.misses; }  // an item that needed an encoder run
  // Pinned entries are never evicted (a step in flight reads them).
  void pin(const Hash128& key);
  void unpin(const Hash128& key);

  uint64_t bytes() const { return bytes_; }
  uint64_t budget() const { return budget_; }
  size_t size() const { return map_.size(); }
  const EncoderCacheStats& stats() const { return stats_; }

 private:
  struct Entry {
    uint64_t bytes = 0;
    int32_t pins = 0;
    std::list<Hash128>::iterator lru;
    Hash128 media;
  };
  void forget(std::unordered_map<Hash128, Entry, Hash128Hasher>::iterator it);
  uint64_t budget_, bytes_ = 0;
  MediaCacheListener listener_;
  std::unordered_map<Hash128, int32_t, Hash128Hasher> media_refs_;  // entries per file
  std::list<Hash128> lru_;                                          // front = least recently used
  std::unordered_map<Hash128, Entry, Hash128Hasher> map_;
  EncoderCacheStats stats_;
};

// The executor's memory for encoder outputs, in the memory of the backend the model computes on:
// f32 embeddings [n, width] stored as f16 (the backend's to_f16 / from_f16 ops), so a device's
// encoder output never crosses to the host.
class EncoderStore {
 public:
  // `be` must outlive the store; FailedPrecondition when it lacks to_f16 or from_f16.
  explicit EncoderStore(const kernels::Backend& be);
  // `embeds`: contiguous f32 [n, width] in be's memory; InvalidArgument else.
  void put(const Hash128& key, const Tensor& embeds);
  void erase(const Hash128& key);
  bool contains(const Hash128& key) const { return map_.count(key) > 0; }
  // Rows [row0, row0 + n) as f32 into dst [n, width] (be's memory). NotFound / InvalidArgument
  // when absent or out of range.
  void read_rows(const Hash128& key, int64_t row0, int64_t n, float* dst) const;
  uint64_t bytes() const { return bytes_; }
  size_t size() const { return map_.size(); }

 private:
  const kernels::Backend& be_;
  std::unordered_map<Hash128, Tensor, Hash128Hasher> map_;  // [n, width] f16, be's memory
  uint64_t bytes_ = 0;
};

}  // namespace mmrt::engine
