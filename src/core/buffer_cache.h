// A cache of large 64-byte-aligned buffers (decoded images, resize intermediates, pixel_values).
// Memory that was never touched costs a page fault per 4 KiB on first use (tens of microseconds
// each inside a micro-VM, where it dominated a 4K image's preprocessing time), so released
// buffers are kept and handed out again for requests of a similar size; small requests go
// straight to the allocator. A BufferCache is a handle: copies share one cache, buffers keep it
// alive, and a default-constructed handle allocates plainly (no caching). The owner (a Backend)
// decides its size; there is no process-wide cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace mmrt {

struct BufferCacheStats {
  size_t cached_bytes = 0;  // idle in the cache now
  uint64_t hits = 0, misses = 0;
};

class BufferCache {
 public:
  BufferCache() = default;  // no cache: every buffer is a plain allocation
  // A cache keeping at most `max_idle_bytes` of released buffers (0: keeps none).
  static BufferCache create(size_t max_idle_bytes = size_t{512} << 20);

  // A buffer of at least `bytes` bytes (contents unspecified), 64-byte aligned; its memory returns
  // to the cache when the last copy of the pointer is released. When the allocation fails the
  // idle buffers are freed and it is tried once more; then ResourceExhausted (naming the size).
  std::shared_ptr<uint8_t> get(size_t bytes) const;

  BufferCacheStats stats() const;
  // Frees every idle buffer and sets the most idle bytes kept from now on.
  void set_limit(size_t max_idle_bytes) const;
  bool enabled() const { return s_ != nullptr; }

 private:
  struct State;
  std::shared_ptr<State> s_;
};

}  // namespace mmrt
