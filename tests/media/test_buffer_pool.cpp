// The large-buffer cache: alignment, reuse of released buffers, the idle limit.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "media/buffer_pool.h"
#include "media/image.h"

using namespace mmrt::media;

TEST(MediaBufferPool, ReusesReleasedBuffersAndHonoursTheLimit) {
  set_buffer_cache_limit(size_t{64} << 20);
  const uint8_t* first = nullptr;
  {
    auto a = pooled_buffer(3 << 20);
    first = a.get();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 64, 0u);
    std::memset(a.get(), 1, 3 << 20);
  }
  EXPECT_GE(buffer_cache_stats().cached_bytes, size_t{3} << 20);
  const uint64_t hits = buffer_cache_stats().hits;
  {
    auto b = pooled_buffer((3 << 20) - 1000);  // a similar size reuses the same buffer
    EXPECT_EQ(b.get(), first);
    EXPECT_EQ(buffer_cache_stats().hits, hits + 1);
    auto c = pooled_buffer(3 << 20);  // the cached one is taken: a new one
    EXPECT_NE(c.get(), first);
    auto small = pooled_buffer(100);  // small requests bypass the cache
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small.get()) % 64, 0u);
  }
  set_buffer_cache_limit(0);  // frees the idle buffers and stops caching
  EXPECT_EQ(buffer_cache_stats().cached_bytes, 0u);
  { auto d = pooled_buffer(1 << 20); }
  EXPECT_EQ(buffer_cache_stats().cached_bytes, 0u);
  set_buffer_cache_limit(size_t{512} << 20);
}

TEST(MediaBufferPool, ImageCopiesAreDeep) {
  Image a(600, 400);
  std::memset(a.data(), 9, a.size_bytes());
  Image b = a;
  EXPECT_NE(b.data(), a.data());
  b.row(10)[5] = 1;
  EXPECT_EQ(a.row(10)[5], 9);
  EXPECT_EQ(std::memcmp(a.row(399), b.row(399), a.stride()), 0);
  Image moved = std::move(b);
  EXPECT_EQ(moved.row(10)[5], 1);
}
