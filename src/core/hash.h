// Content hashing (XXH3, 128-bit) for cache keys: media bytes, KV block chains, encoder outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mmrt {

struct Hash128 {
  uint64_t lo = 0, hi = 0;
  bool operator==(const Hash128&) const = default;
  std::string hex() const;  // 32 hex digits
  // hex()'s inverse; false (and `out` unchanged) for anything but 32 lower-case hex digits.
  static bool from_hex(std::string_view s, Hash128& out);
};

struct Hash128Hasher {
  size_t operator()(const Hash128& h) const {
    return static_cast<size_t>(h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull));
  }
};

Hash128 hash128(const void* data, size_t n, uint64_t seed = 0);
inline Hash128 hash128(std::string_view s, uint64_t seed = 0) {
  return hash128(s.data(), s.size(), seed);
}

// Incremental hashing of several pieces (order matters).
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  Hasher& update(const void* data, size_t n);
  Hasher& update(std::string_view s) { return update(s.data(), s.size()); }
  Hasher& update(const Hash128& h) { return update(&h, sizeof h); }
  template <typename T>
  Hasher& update_pod(const T& v) {
    return update(&v, sizeof v);
  }
  Hash128 digest() const;

 private:
  void* state_;
};

}  // namespace mmrt
