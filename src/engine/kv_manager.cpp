#include "engine/kv_manager.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace mmrt::engine {

Hash128 tenant_salt(std::string_view tenant) {
  return hash128("tenant:" + std::string(tenant));
}

Hash128 media_cache_key(const Hash128& content_key, const Hash128& salt,
                        std::string_view encoder_precision) {
  Hasher h;
  h.update(content_key).update(salt);
  h.update(encoder_precision);
  return h.digest();
}

KvBlockManager::KvBlockManager(int32_t num_blocks, int32_t block_size, bool prefix_caching,
                               KvCacheListener listener)
    : block_size_(block_size), prefix_caching_(prefix_caching), listener_(std::move(listener)) {
  if (num_blocks < 1 || block_size < 1)
    throw InvalidArgument("KV manager needs at least one block of at least one token");
  ref_.assign(static_cast<size_t>(num_blocks), 0);
  prev_.assign(static_cast<size_t>(num_blocks), -1);
  next_.assign(static_cast<size_t>(num_blocks), -1);
  in_free_.assign(static_cast<size_t>(num_blocks), 0);
  block_key_.resize(static_cast<size_t>(num_blocks));
  has_key_.assign(static_cast<size_t>(num_blocks), 0);
  for (int32_t b = 0; b < num_blocks; ++b) lru_push_back(b);
}

void KvBlockManager::lru_remove(int32_t b) {
  const size_t i = static_cast<size_t>(b);
  MMRT_CHECK(in_free_[i], "block not in the free list");
  if (prev_[i] >= 0)
    next_[static_cast<size_t>(prev_[i])] = next_[i];
  else
    head_ = next_[i];
  if (next_[i] >= 0)
    prev_[static_cast<size_t>(next_[i])] = prev_[i];
  else
    tail_ = prev_[i];
  prev_[i] = next_[i] = -1;
  in_free_[i] = 0;
  --n_free_;
}

void KvBlockManager::lru_push_back(int32_t b) {
  const size_t i = static_cast<size_t>(b);
  prev_[i] = tail_;
  next_[i] = -1;
  if (tail_ >= 0)
    next_[static_cast<size_t>(tail_)] = b;
  else
    head_ = b;
  tail_ = b;
  in_free_[i] = 1;
  ++n_free_;
}

int32_t KvBlockManager::lru_pop_front() {
  int32_t b = head_;
  MMRT_CHECK(b >= 0, "free list empty");
  lru_remove(b);
  if (has_key_[static_cast<size_t>(b)]) {  // evict its cached content
    cached_.erase(block_key_[static_cast<size_t>(b)]);
    has_key_[static_cast<size_t>(b)] = 0;
    ++stats_.evictions;
    if (listener_) listener_(false, block_key_[static_cast<size_t>(b)]);
  }
  return b;
}

Hash128 KvBlockManager::block_hash(const Request& req, int64_t j, const Hash128& parent) const {
  // A media span hashes by its content key (and where in the span this block starts), so the
  // same image in the same context gives the same block keys.
  return prefix_block_hash(
      parent, j * block_size_, block_size_, [&](int64_t i) { return req.token_at(i); }, req.media);
}

template <class OnHit>
int64_t KvBlockManager::match_cached_prefix(const Request& req, OnHit&& on_hit) const {
  if (!prefix_caching_) return 0;
  const int64_t usable = (req.num_tokens() - 1) / block_size_;  // leave a token to compute
  Hash128 parent = req.tenant_salt;
  int64_t j = 0;
  for (; j < usable; ++j) {
    const Hash128 h = block_hash(req, j, parent);
    auto it = cached_.find(h);
    if (it == cached_.end()) break;
    on_hit(it->second, h);
    parent = h;
  }
  return j;
}

int64_t KvBlockManager::acquire_cached_prefix(Request& req) {
  MMRT_CHECK(!tables_.count(req.id), "acquire_cached_prefix on a request that holds blocks");
  Table& t = tables_[req.id];
  req.num_computed = 0;
  if (!prefix_caching_) return 0;
  stats_.prefix_query_tokens += req.num_tokens();
  match_cached_prefix(req, [&](int32_t b, const Hash128& h) {
    if (ref_[static_cast<size_t>(b)]++ == 0) lru_remove(b);
    t.blocks.push_back(b);
    t.hashes.push_back(h);
  });
  int64_t hit = static_cast<int64_t>(t.blocks.size()) * block_size_;
  stats_.prefix_hit_tokens += hit;
  req.num_computed = hit;
  req.num_cached_hit = hit;
  return hit;
}

int64_t KvBlockManager::cached_prefix_tokens(const Request& req) const {
  return match_cached_prefix(req, [](int32_t, const Hash128&) {}) * block_size_;
}

int32_t KvBlockManager::blocks_needed(const Request& req, int64_t n_new) const {
  auto it = tables_.find(req.id);
  int64_t have = it == tables_.end() ? 0 : static_cast<int64_t>(it->second.blocks.size());
  int64_t want = (req.num_computed + n_new + block_size_ - 1) / block_size_;
  return static_cast<int32_t>(std::max<int64_t>(0, want - have));
}

bool KvBlockManager::allocate(Request& req, int64_t n_new) {
  int32_t need = blocks_needed(req, n_new);
  if (need > n_free_) return false;
  Table& t = tables_[req.id];
  for (int32_t i = 0; i < need; ++i) {
    int32_t b = lru_pop_front();
    ref_[static_cast<size_t>(b)] = 1;
    t.blocks.push_back(b);
  }
  return true;
}

void KvBlockManager::commit(Request& req) {
  if (!prefix_caching_) return;
  auto it = tables_.find(req.id);
  if (it == tables_.end()) return;
  Table& t = it->second;
  const int64_t full =
      std::min<int64_t>(req.num_computed / block_size_, static_cast<int64_t>(t.blocks.size()));
  for (int64_t j = static_cast<int64_t>(t.hashes.size()); j < full; ++j) {
    Hash128 parent = j == 0 ? req.tenant_salt : t.hashes[static_cast<size_t>(j - 1)];
    Hash128 h = block_hash(req, j, parent);
    t.hashes.push_back(h);
    int32_t b = t.blocks[static_cast<size_t>(j)];
    if (!cached_.count(h) && !has_key_[static_cast<size_t>(b)]) {
      cached_[h] = b;
      block_key_[static_cast<size_t>(b)] = h;
      has_key_[static_cast<size_t>(b)] = 1;
      if (listener_) listener_(true, h);
    }
  }
}

void KvBlockManager::free(Request& req) {
  auto it = tables_.find(req.id);
  if (it == tables_.end()) return;
  // Tail first, so a sequence's last blocks are evicted before its shared prefix.
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) {
    MMRT_CHECK(ref_[static_cast<size_t>(*b)] > 0, "freeing an unreferenced block");
    if (--ref_[static_cast<size_t>(*b)] == 0) {
      if (has_key_[static_cast<size_t>(*b)])
        lru_push_back(*b);
      else {
        // Uncached blocks go to the front: reuse them before evicting cached content.
        const size_t i = static_cast<size_t>(*b);
        prev_[i] = -1;
        next_[i] = head_;
        if (head_ >= 0)
          prev_[static_cast<size_t>(head_)] = *b;
        else
          tail_ = *b;
        head_ = *b;
        in_free_[i] = 1;
        ++n_free_;
      }
    }
  }
  tables_.erase(it);
}

const std::vector<int32_t>& KvBlockManager::block_table(const Request& req) const {
  auto it = tables_.find(req.id);
  if (it == tables_.end())
    throw InternalError("request " + std::to_string(req.id) + " holds no KV blocks");
  return it->second.blocks;
}

void KvBlockManager::check_invariants() const {
  std::vector<int32_t> refs(ref_.size(), 0);
  for (const auto& [id, t] : tables_)
    for (int32_t b : t.blocks) ++refs[static_cast<size_t>(b)];
  int32_t free_count = 0;
  for (size_t b = 0; b < ref_.size(); ++b) {
    if (refs[b] != ref_[b])
      throw InternalError("block " + std::to_string(b) + " refcount " + std::to_string(ref_[b]) +
                          " but " + std::to_string(refs[b]) + " table references");
    if ((ref_[b] == 0) != static_cast<bool>(in_free_[b]))
      throw InternalError("block " + std::to_string(b) +
                          " free-list membership disagrees with its refcount");
    free_count += ref_[b] == 0;
  }
  int32_t walked = 0;
  for (int32_t b = head_; b >= 0; b = next_[static_cast<size_t>(b)]) ++walked;
  if (walked != free_count || n_free_ != free_count)
    throw InternalError("free list holds " + std::to_string(walked) + " blocks, counter " +
                        std::to_string(n_free_) + ", expected " + std::to_string(free_count));
  for (const auto& [h, b] : cached_)
    if (!has_key_[static_cast<size_t>(b)] || !(block_key_[static_cast<size_t>(b)] == h))
      throw InternalError("prefix cache entry points at a block with another key");
}

}  // namespace mmrt::engine
