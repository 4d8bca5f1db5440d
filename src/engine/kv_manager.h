// The books of the paged KV cache: which physical blocks each request holds, reference counts,
// and the prefix cache (full blocks keyed by a chained content hash, in which a media span hashes
// by its media key, rooted in the tenant's salt). Unreferenced blocks sit in an LRU free list;
// cached ones among them are evicted only when a block is needed. The memory itself belongs to
// the executor (kernels::KvCache); this class never touches it.
//
// Allocation is a transaction: allocate() either provides every block a step needs or changes
// nothing and returns false ("no room" is a normal outcome: the scheduler preempts or waits).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/hash.h"
#include "engine/request.h"

namespace mmrt::engine {

// The prefix cache's keys, shared with whoever predicts them (a cluster's router,
// cluster/prompt_blocks.h): the chain starts at the tenant's salt; block j of a prompt hashes
// its parent, its tokens and, for each media span overlapping it, the span's content key and
// where in the span the block starts. `token_at(i)` gives token i (i in [b0, b0 + n)).
Hash128 tenant_salt(std::string_view tenant);
// A media item's key in the encoder and prefix caches: the processor's content key, the
// tenant's salt and the encoder's precision (an int8 and a bf16 encoding are different entries).
Hash128 media_cache_key(const Hash128& content_key, const Hash128& salt,
                        std::string_view encoder_precision);
template <class TokenAt>
Hash128 prefix_block_hash(const Hash128& parent, int64_t b0, int64_t n, TokenAt&& token_at,
                          std::span<const MediaItem> media) {
  const int64_t b1 = b0 + n;
  Hasher h;
  h.update(parent);
  for (int64_t i = b0; i < b1; ++i) h.update_pod(static_cast<int32_t>(token_at(i)));
  for (const MediaItem& m : media) {
    if (m.begin >= b1 || m.begin + m.n_tokens <= b0) continue;
    h.update(m.key);
    h.update_pod(std::max<int64_t>(b0 - m.begin, 0));
  }
  return h.digest();
}

// Told when a full block's key enters the prefix cache (stored) and when it leaves (its block
// reused for other content). Called on the step loop: it must not block.
using KvCacheListener = std::function<void(bool stored, const Hash128& block)>;

struct KvManagerStats {
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up at admission
  int64_t prefix_hit_tokens = 0;    // ... found in the cache
  int64_t evictions = 0;            // cached blocks reused for new content
};

class KvBlockManager {
 public:
  KvBlockManager(int32_t num_blocks, int32_t block_size, bool prefix_caching = true,
                 KvCacheListener listener = nullptr);

  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return static_cast<int32_t>(ref_.size()); }
  int32_t num_free_blocks() const { return n_free_; }  // unreferenced (cached or not)
  int32_t num_used_blocks() const { return num_blocks() - n_free_; }
  int32_t num_cached_blocks() const { return static_cast<int32_t>(cached_.size()); }

  // For a request that holds no blocks: takes references on the longest run of cached full
  // blocks matching its tokens (always leaving at least one token to compute), sets
  // req.num_computed and returns the number of tokens reused.
  int64_t acquire_cached_prefix(Request& req);
  // The tokens acquire_cached_prefix would reuse now, without taking anything (admission's
  // estimate of a request's prefill work).
  int64_t cached_prefix_tokens(const Request& req) const;
  // Blocks needed so that req can hold num_computed + n_new tokens.
  int32_t blocks_needed(const Request& req, int64_t n_new) const;
  // Provides those blocks, or returns false and changes nothing.
  bool allocate(Request& req, int64_t n_new);
  // After a step advanced req.num_computed: registers newly full blocks in the prefix cache.
  void commit(Request& req);
  // Drops every reference req holds (finish, cancel, preempt). Full registered blocks stay
  // cached and evictable; the request's tail blocks go first in eviction order.
  void free(Request& req);

  const std::vector<int32_t>& block_table(const Request& req) const;
  bool holds(const Request& req) const { return tables_.count(req.id) > 0; }
  const KvManagerStats& stats() const { return stats_; }

  // The chained hash of full block j of req (tokens, overlapping media keys, tenant salt).
  Hash128 block_hash(const Request& req, int64_t j, const Hash128& parent) const;
  // Checks internal invariants (refcounts equal table references, free-list size); for tests.
  void check_invariants() const;

 private:
  // Walks the leading full blocks of req found in the prefix cache (leaving at least one token
  // to compute), calling on_hit(block, hash) for each in order; returns how many matched.
  template <class OnHit>
  int64_t match_cached_prefix(const Request& req, OnHit&& on_hit) const;

  struct Table {
    std::vector<int32_t> blocks;
    std::vector<Hash128> hashes;  // of the leading full blocks already hashed
  };
  void lru_remove(int32_t b);
  void lru_push_back(int32_t b);
  int32_t lru_pop_front();

  int32_t block_size_;
  bool prefix_caching_;
  std::vector<int32_t> ref_;          // refcount per block
  std::vector<int32_t> prev_, next_;  // LRU list of free blocks (-1 terminated)
  std::vector<uint8_t> in_free_;
  int32_t head_ = -1, tail_ = -1, n_free_ = 0;
  std::vector<Hash128> block_key_;  // registered hash per block
  std::vector<uint8_t> has_key_;
  std::unordered_map<Hash128, int32_t, Hash128Hasher> cached_;
  std::unordered_map<RequestId, Table> tables_;
  KvManagerStats stats_;
  KvCacheListener listener_;
};

}  // namespace mmrt::engine
