// A process-wide cache of large 64-byte-aligned buffers for decoded images, resize
// intermediates and pixel_values. Memory that was never touched costs a page fault per 4 KiB on
// first use (tens of microseconds each inside a micro-VM, where it dominated a 4K image's
// preprocessing time), so released buffers are kept and handed out again for requests of a
// similar size. Small requests go straight to the allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace mmrt::media {

// A buffer of at least `bytes` bytes (contents unspecified); the memory returns to the cache
// when the last shared_ptr copy is released. Throws ResourceExhausted when out of memory.
std::shared_ptr<uint8_t> pooled_buffer(size_t bytes);

struct BufferCacheStats {
  size_t cached_bytes = 0;  // idle in the cache now
  uint64_t hits = 0, misses = 0;
};
BufferCacheStats buffer_cache_stats();

// Frees every idle buffer and sets the most idle bytes kept from now on (default 512 MiB;
// 0 disables caching).
void set_buffer_cache_limit(size_t bytes);

}  // namespace mmrt::media
