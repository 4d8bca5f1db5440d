// The large-buffer cache: alignment, reuse of released buffers, the idle limit, handles that
// share one cache, and buffers that outlive every handle.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "core/buffer_cache.h"

using namespace mmrt;

TEST(BufferCache, ReusesReleasedBuffersAndHonoursTheLimit) {
  BufferCache cache = BufferCache::create(size_t{64} << 20);
  const uint8_t* first = nullptr;
  {
    auto a = cache.get(3 << 20);
    first = a.get();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 64, 0u);
    std::memset(a.get(), 1, 3 << 20);
  }
  EXPECT_GE(cache.stats().cached_bytes, size_t{3} << 20);
  const uint64_t hits = cache.stats().hits;
  {
    auto b = cache.get((3 << 20) - 1000);  // a similar size reuses the same buffer
    EXPECT_EQ(b.get(), first);
    EXPECT_EQ(cache.stats().hits, hits + 1);
    auto c = cache.get(3 << 20);  // the cached one is taken: a new one
    EXPECT_NE(c.get(), first);
    auto small = cache.get(100);  // small requests bypass the cache
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small.get()) % 64, 0u);
  }
  cache.set_limit(0);  // frees the idle buffers and stops caching
  EXPECT_EQ(cache.stats().cached_bytes, 0u);
  { auto d = cache.get(1 << 20); }
  EXPECT_EQ(cache.stats().cached_bytes, 0u);
}

TEST(BufferCache, HandlesShareOneCacheAndBuffersOutliveThem) {
  std::shared_ptr<uint8_t> kept;
  {
    BufferCache a = BufferCache::create(size_t{16} << 20);
    BufferCache b = a;  // the same cache
    { auto x = a.get(1 << 20); }
    EXPECT_EQ(b.stats().cached_bytes, a.stats().cached_bytes);
    EXPECT_GE(b.stats().cached_bytes, size_t{1} << 20);
    kept = b.get(2 << 20);
  }
  // Every handle is gone; the buffer is still valid and returns to the cache state it holds.
  std::memset(kept.get(), 3, 2 << 20);
  kept.reset();
}

TEST(BufferCache, AnEmptyHandleAllocatesPlainly) {
  BufferCache none;
  EXPECT_FALSE(none.enabled());
  auto p = none.get(1 << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % 64, 0u);
  EXPECT_EQ(none.stats().hits + none.stats().misses, 0u);
}
