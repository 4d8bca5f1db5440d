// Base64 (RFC 4648, standard alphabet, padded) encoding. Decoding, which must check untrusted
// input, is the server's (server/api.h: decode_base64).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mmrt {

std::string base64_encode(const uint8_t* data, size_t n);
inline std::string base64_encode(std::string_view s) {
  return base64_encode(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

}  // namespace mmrt
