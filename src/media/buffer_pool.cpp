#include "media/buffer_pool.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "core/error.h"

namespace mmrt::media {

namespace {

constexpr size_t kMinPooled = size_t{256} << 10;  // smaller requests: plain allocations

// Sizes are rounded up to a step of 1/64 to 1/32 of the size, so similar requests share buffers.
size_t bucket_size(size_t bytes) {
  size_t step = size_t{64} << 10;
  while (step * 64 < bytes) step <<= 1;
  return (bytes + step - 1) / step * step;
}

struct Cache {
  std::mutex mu;
  std::multimap<size_t, uint8_t*> idle;  // capacity -> buffer
  size_t idle_bytes = 0, limit = size_t{512} << 20;
  uint64_t hits = 0, misses = 0;

  void release(uint8_t* p, size_t cap) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (idle_bytes + cap <= limit) {
        idle.emplace(cap, p);
        idle_bytes += cap;
        return;
      }
    }
    std::free(p);
  }
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: buffers may be released during exit
  return *c;
}

uint8_t* allocate(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw ResourceExhausted("out of memory allocating " + std::to_string(bytes) + " bytes");
  return static_cast<uint8_t*>(p);
}

}  // namespace

std::shared_ptr<uint8_t> pooled_buffer(size_t bytes) {
  if (bytes < kMinPooled) return std::shared_ptr<uint8_t>(allocate(bytes), std::free);
  const size_t cap = bucket_size(bytes);
  Cache& c = cache();
  uint8_t* p = nullptr;
  size_t got = cap;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    // The smallest idle buffer that fits, unless it is more than twice too big.
    auto it = c.idle.lower_bound(cap);
    if (it != c.idle.end() && it->first <= 2 * cap) {
      p = it->second;
      got = it->first;
      c.idle_bytes -= it->first;
      c.idle.erase(it);
      ++c.hits;
    } else {
      ++c.misses;
    }
  }
  if (!p) p = allocate(cap);
  return std::shared_ptr<uint8_t>(p, [got](uint8_t* q) { cache().release(q, got); });
}

BufferCacheStats buffer_cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return {c.idle_bytes, c.hits, c.misses};
}

void set_buffer_cache_limit(size_t bytes) {
  Cache& c = cache();
  std::multimap<size_t, uint8_t*> drop;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.limit = bytes;
    drop.swap(c.idle);
    c.idle_bytes = 0;
  }
  for (auto& [cap, p] : drop) std::free(p);
}

}  // namespace mmrt::media
