#include "engine/encoder_cache.h"

#include "core/error.h"
#include "kernels/layout.h"

namespace mmrt::engine {

EncoderCache::EncoderCache(uint64_t byte_budget, MediaCacheListener listener)
    : budget_(byte_budget), listener_(std::move(listener)) {}

void EncoderCache::forget(std::unordered_map<Hash128, Entry, Hash128Hasher>::iterator it) {
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  const Hash128 media = it->second.media;
  map_.erase(it);
  if (media == Hash128{}) return;
  auto r = media_refs_.find(media);
  if (r != media_refs_.end() && --r->second == 0) {
    media_refs_.erase(r);
    listener_(false, media);
  }
}

bool EncoderCache::lookup(const Hash128& key) {
  const bool hit = contains(key);
  (hit ? stats_.hits : stats_.misses)++;
  return hit;
}

bool EncoderCache::reserve(const Hash128& key, uint64_t bytes, std::vector<Hash128>& evicted,
                           const Hash128& media) {
  if (contains(key)) {
    touch(key);
    return true;
  }
  uint64_t evictable = 0;
  for (const Hash128& k : lru_) {
    const Entry& e = map_.at(k);
    if (e.pins == 0) evictable += e.bytes;
  }
  if (bytes > budget_ || bytes_ - evictable + bytes > budget_) {
    ++stats_.rejected;
    return false;
  }
  // Evict unpinned entries, least recently used first, until it fits.
  for (auto it = lru_.begin(); bytes_ + bytes > budget_ && it != lru_.end();) {
    auto entry = map_.find(*it);
    if (entry->second.pins > 0) {
      ++it;
      continue;
    }
    ++it;  // forget() erases the current position
    evicted.push_back(entry->first);
    forget(entry);
    ++stats_.evictions;
  }
  Entry e;
  e.bytes = bytes;
  e.lru = lru_.insert(lru_.end(), key);
  e.media = listener_ ? media : Hash128{};  // files are counted only for a listener
  bytes_ += bytes;
  map_.emplace(key, e);
  if (e.media != Hash128{} && ++media_refs_[e.media] == 1) listener_(true, e.media);
  return true;
}

void EncoderCache::touch(const Hash128& key) {
  auto it = map_.find(key);
  if (it != map_.end()) lru_.splice(lru_.end(), lru_, it->second.lru);
}

void EncoderCache::erase(const Hash128& key) {
  auto it = map_.find(key);
  if (it != map_.end()) forget(it);
}

void EncoderCache::pin(const Hash128& key) {
  auto it = map_.find(key);
  if (it == map_.end()) throw InternalError("encoder cache: pin of an absent entry " + key.hex());
  ++it->second.pins;
}

void EncoderCache::unpin(const Hash128& key) {
  auto it = map_.find(key);
  if (it != map_.end() && it->second.pins > 0) --it->second.pins;
}

EncoderStore::EncoderStore(const kernels::Backend& be) : be_(be) {
  be.require({kernels::Op::kToF16, kernels::Op::kFromF16}, "the engine's encoder store");
}

void EncoderStore::put(const Hash128& key, const Tensor& embeds) {
  if (embeds.dtype() != DType::kF32 || embeds.rank() != 2 || !embeds.is_contiguous() ||
      embeds.device() != be_.device())
    throw InvalidArgument("encoder store keeps contiguous f32 [n, width] embeddings on " +
                          device_str(be_.device()) + ", got " + embeds.describe() + " on " +
                          device_str(embeds.device()));
  if (contains(key)) return;
  Tensor f16 = be_.empty(DType::kF16, embeds.shape());
  kernels::to_f16(be_, embeds.data<float>(), static_cast<uint16_t*>(f16.raw()), embeds.numel());
  bytes_ += f16.nbytes();
  map_.emplace(key, std::move(f16));
}

void EncoderStore::erase(const Hash128& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return;
  bytes_ -= it->second.nbytes();
  map_.erase(it);
}

void EncoderStore::read_rows(const Hash128& key, int64_t row0, int64_t n, float* dst) const {
  auto it = map_.find(key);
  if (it == map_.end()) throw NotFound("encoder store has no entry " + key.hex());
  const Tensor& t = it->second;
  const int64_t H = t.dim(1);
  if (row0 < 0 || n < 0 || row0 + n > t.dim(0))
    throw InvalidArgument("encoder store read of rows [" + std::to_string(row0) + ", " +
                          std::to_string(row0 + n) + ") from an entry of " +
                          std::to_string(t.dim(0)) + " rows");
  kernels::from_f16(be_, static_cast<const uint16_t*>(t.raw()) + row0 * H, dst, n * H);
}

}  // namespace mmrt::engine
