#include "server/http_framing.h"

#include <algorithm>
#include <cctype>

namespace mmrt::server {

std::string framing_error(const std::string_view* transfer_encoding, bool has_content_length,
                          int& status) {
  if (!transfer_encoding) return {};
  if (has_content_length) {
    status = 400;
    return "a request may not carry both Transfer-Encoding and Content-Length";
  }
  std::string v;
  for (char c : *transfer_encoding)
    if (c != ' ' && c != '\t') v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "chunked") return {};
  status = 501;
  std::string shown(transfer_encoding->substr(0, 64));
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 || c == '"' || c == '\\' ||
        static_cast<unsigned char>(c) >= 0x7f)
      c = '?';
  return "Transfer-Encoding '" + shown + "' is not supported: only chunked (alone) is";
}

}  // namespace mmrt::server
