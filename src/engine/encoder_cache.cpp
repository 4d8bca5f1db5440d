#include "engine/encoder_cache.h"

#include "core/convert.h"
#include "core/error.h"

namespace mmrt::engine {

EncoderCache::EncoderCache(uint64_t byte_budget) : budget_(byte_budget) {}

EncoderCache::Entry& EncoderCache::at(const Hash128& key) {
  auto it = map_.find(key);
  if (it == map_.end()) throw NotFound("encoder cache has no entry " + key.hex());
  return it->second;
}

bool EncoderCache::lookup(const Hash128& key) {
  bool hit = contains(key);
  (hit ? stats_.hits : stats_.misses)++;
  return hit;
}

bool EncoderCache::put(const Hash128& key, const Tensor& embeds) {
  if (embeds.dtype() != DType::kF32 || embeds.rank() != 2)
    throw InvalidArgument("encoder cache stores f32 [n, hidden] embeddings, got " + embeds.describe());
  if (contains(key)) return true;
  const uint64_t need = static_cast<uint64_t>(embeds.numel()) * 2;
  // Evict unpinned entries, least recently used first, until it fits.
  for (auto it = lru_.begin(); bytes_ + need > budget_ && it != lru_.end();) {
    Entry& e = map_.at(*it);
    if (e.pins > 0) {
      ++it;
      continue;
    }
    bytes_ -= e.f16.nbytes();
    map_.erase(*it);
    it = lru_.erase(it);
    ++stats_.evictions;
  }
  if (bytes_ + need > budget_) {
    ++stats_.rejected;
    return false;
  }
  Tensor src = embeds.contiguous();
  Entry e;
  e.f16 = Tensor::empty(DType::kF16, src.shape());
  f32_to_f16(src.data<float>(), reinterpret_cast<uint16_t*>(e.f16.raw()), static_cast<size_t>(src.numel()));
  e.lru = lru_.insert(lru_.end(), key);
  bytes_ += need;
  map_.emplace(key, std::move(e));
  return true;
}

void EncoderCache::read_rows(const Hash128& key, int64_t row0, int64_t n, float* dst) {
  Entry& e = at(key);
  const int64_t H = e.f16.dim(1);
  if (row0 < 0 || row0 + n > e.f16.dim(0))
    throw InvalidArgument("encoder cache read of rows [" + std::to_string(row0) + ", " + std::to_string(row0 + n) +
                          ") from an entry of " + std::to_string(e.f16.dim(0)) + " rows");
  f16_to_f32(reinterpret_cast<const uint16_t*>(e.f16.raw()) + row0 * H, dst, static_cast<size_t>(n * H));
  lru_.splice(lru_.end(), lru_, e.lru);
}

int64_t EncoderCache::hidden(const Hash128& key) { return at(key).f16.dim(1); }

void EncoderCache::pin(const Hash128& key) { ++at(key).pins; }
void EncoderCache::unpin(const Hash128& key) {
  Entry& e = at(key);
  if (e.pins > 0) --e.pins;
}

}  // namespace mmrt::engine
