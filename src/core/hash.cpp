#include "core/hash.h"

#include <xxhash.h>
#include <cstdio>

#include "core/error.h"

namespace mmrt {

std::string Hash128::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

bool Hash128::from_hex(std::string_view s, Hash128& out) {
  if (s.size() != 32) return false;
  uint64_t part[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = s[i];
    uint64_t d;
    if (c >= '0' && c <= '9')
      d = static_cast<uint64_t>(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = static_cast<uint64_t>(c - 'a' + 10);
    else
      return false;
    part[i / 16] = part[i / 16] << 4 | d;
  }
  out = {part[1], part[0]};  // hi first in the text
  return true;
}

Hash128 hash128(const void* data, size_t n, uint64_t seed) {
  XXH128_hash_t h = XXH3_128bits_withSeed(data, n, seed);
  return {h.low64, h.high64};
}

Hasher::Hasher() : state_(XXH3_createState()) {
  if (!state_) throw ResourceExhausted("out of memory creating a hash state");
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}
Hasher::~Hasher() {
  XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

Hasher& Hasher::update(const void* data, size_t n) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, n);
  return *this;
}

Hash128 Hasher::digest() const {
  XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return {h.low64, h.high64};
}

}  // namespace mmrt
