// Vision-encoder outputs kept across requests: key = hash of the media bytes + model + processor
// settings + tenant salt (so tenants never share entries), value = embeddings stored in f16,
// within a byte budget, least recently used first out. Entries a running request still needs
// are pinned and never evicted.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>

#include "core/hash.h"
#include "core/tensor.h"

namespace mmrt::engine {

struct EncoderCacheStats {
  int64_t hits = 0, misses = 0, evictions = 0, rejected = 0;
};

class EncoderCache {
 public:
  explicit EncoderCache(uint64_t byte_budget);

  bool contains(const Hash128& key) const { return map_.count(key) > 0; }
  // Counts a hit or a miss (for the hit rate) and returns contains(key).
  bool lookup(const Hash128& key);
  // Stores f32 embeddings [n, hidden] as f16, evicting unpinned LRU entries to make room.
  // Returns false (stores nothing) when the entry cannot fit even then.
  bool put(const Hash128& key, const Tensor& embeds);
  // Rows [row0, row0 + n) of an entry as f32 into dst [n, hidden]; marks it recently used.
  void read_rows(const Hash128& key, int64_t row0, int64_t n, float* dst);
  int64_t hidden(const Hash128& key);
  void pin(const Hash128& key);
  void unpin(const Hash128& key);

  uint64_t bytes() const { return bytes_; }
  uint64_t budget() const { return budget_; }
  size_t size() const { return map_.size(); }
  const EncoderCacheStats& stats() const { return stats_; }

 private:
  struct Entry {
    Tensor f16;  // [n, hidden]
    int32_t pins = 0;
    std::list<Hash128>::iterator lru;
  };
  Entry& at(const Hash128& key);
  uint64_t budget_, bytes_ = 0;
  std::list<Hash128> lru_;  // front = least recently used
  std::unordered_map<Hash128, Entry, Hash128Hasher> map_;
  EncoderCacheStats stats_;
};

}  // namespace mmrt::engine
