#include "core/buffer_cache.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "core/error.h"

namespace mmrt {

namespace {

constexpr size_t kMinPooled = size_t{256} << 10;  // smaller requests: plain allocations

// Sizes are rounded up to a step of 1/64 to 1/32 of the size, so similar requests share buffers.
size_t bucket_size(size_t bytes) {
  size_t step = size_t{64} << 10;
  while (step * 64 < bytes) step <<= 1;
  return (bytes + step - 1) / step * step;
}

uint8_t* allocate(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p)
    throw ResourceExhausted("out of memory allocating a " + std::to_string(bytes) + "-byte buffer");
  return static_cast<uint8_t*>(p);
}

}  // namespace

struct BufferCache::State {
  std::mutex mu;
  std::multimap<size_t, uint8_t*> idle;  // capacity -> buffer
  size_t idle_bytes = 0, limit = 0;
  uint64_t hits = 0, misses = 0;

  ~State() {
    for (auto& [cap, p] : idle) std::free(p);
  }
  // Frees every idle buffer; false when there was none.
  bool drop_idle() {
    std::multimap<size_t, uint8_t*> drop;
    {
      std::lock_guard<std::mutex> lock(mu);
      drop.swap(idle);
      idle_bytes = 0;
    }
    for (auto& [cap, p] : drop) std::free(p);
    return !drop.empty();
  }
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

BufferCache BufferCache::create(size_t max_idle_bytes) {
  BufferCache c;
  c.s_ = std::make_shared<State>();
  c.s_->limit = max_idle_bytes;
  return c;
}

std::shared_ptr<uint8_t> BufferCache::get(size_t bytes) const {
  if (!s_ || bytes < kMinPooled) return std::shared_ptr<uint8_t>(allocate(bytes), std::free);
  const size_t cap = bucket_size(bytes);
  uint8_t* p = nullptr;
  size_t got = cap;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    // The smallest idle buffer that fits, unless it is more than twice too big.
    auto it = s_->idle.lower_bound(cap);
    if (it != s_->idle.end() && it->first <= 2 * cap) {
      p = it->second;
      got = it->first;
      s_->idle_bytes -= it->first;
      s_->idle.erase(it);
      ++s_->hits;
    } else {
      ++s_->misses;
    }
  }
  if (!p) {
    try {
      p = allocate(cap);
    } catch (const ResourceExhausted&) {
      // Idle buffers of other sizes may be all that stands between this one and a memory limit.
      if (!s_->drop_idle()) throw;
      p = allocate(cap);
    }
  }
  // The deleter keeps the cache's state alive: a buffer may outlive every handle.
  return std::shared_ptr<uint8_t>(p, [s = s_, got](uint8_t* q) { s->release(q, got); });
}

BufferCacheStats BufferCache::stats() const {
  if (!s_) return {};
  std::lock_guard<std::mutex> lock(s_->mu);
  return {s_->idle_bytes, s_->hits, s_->misses};
}

void BufferCache::set_limit(size_t max_idle_bytes) const {
  if (!s_) return;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->limit = max_idle_bytes;
  }
  s_->drop_idle();
}

}  // namespace mmrt
