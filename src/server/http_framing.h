// The framing rules the HTTP layer adds to its parser's (RFC 9112 lets a server refuse these):
// pure string logic, shared by the server (http.cpp), its tests and the HTTP fuzzer.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mmrt::server {

// What the read buffer holds beyond the header limit: a chunk-size line with its extensions,
// or the trailer section, must fit in it whole (the parser needs each complete), so neither can
// grow without bound.
inline constexpr size_t kFramingSlack = 16 << 10;

// A request's transfer framing, from its header: `transfer_encoding` is the Transfer-Encoding
// value (nullptr: none), `has_content_length` whether Content-Length is present. Empty when
// the framing is fine; else the reason, with `status` set: 501 for a transfer coding other than
// chunked alone (the body would be read as if plain), 400 for both Transfer-Encoding and
// Content-Length (two lengths: the request-smuggling case). The coding is quoted cut to 64
// characters, with control characters, quotes and backslashes replaced.
std::string framing_error(const std::string_view* transfer_encoding, bool has_content_length,
                          int& status);

}  // namespace mmrt::server
