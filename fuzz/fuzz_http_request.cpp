// HTTP/1.1 requests as `mmrt serve` reads them: Boost.Beast's request parser (request line,
// headers, Content-Length and chunked bodies: chunk sizes, extensions, trailers) configured as
// the server configures it, a read buffer bounded as the server bounds it (the header limit plus
// the framing slack), and the server's own framing rules (http_framing.h) checked on the header
// before the body. Pipelined requests are read one after the other. Invariants: the buffer
// never holds more than its bound, no body exceeds the body limit, and a request that passes
// the framing check has at most one transfer length.
#include <algorithm>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "server/http_framing.h"

namespace http = boost::beast::http;

namespace {

// The server's limits scaled down (16 KiB headers + 16 KiB slack in production) so that inputs
// of the smoke run's length reach every limit, the bounded buffer's included.
constexpr size_t kHeaderLimit = 2048, kBodyLimit = 4096;
constexpr size_t kBufferLimit = kHeaderLimit + mmrt::server::kFramingSlack / 8;

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  boost::beast::flat_buffer buf(kBufferLimit);
  size_t fed = 0;
  for (int request = 0; request < 8; ++request) {
    std::optional<http::request_parser<http::string_body>> p;
    p.emplace();
    p->header_limit(kHeaderLimit);
    p->body_limit(kBodyLimit);
    p->eager(true);
    bool framing_checked = false;
    boost::beast::error_code ec;
    while (!p->is_done()) {
      // Read as the server does: whatever fits in the bounded buffer, 4 KB at a time.
      if (buf.size() == 0 || ec == http::error::need_more) {
        const size_t room = buf.max_size() - buf.size();
        if (room == 0) return 0;         // the server's read fails here: buffer_overflow -> 400
        if (fed == in.size()) return 0;  // the client stopped sending: the read timeout
        const size_t n = std::min({room, in.size() - fed, size_t{4096}});
        auto dst = buf.prepare(n);
        std::memcpy(dst.data(), in.data() + fed, n);
        buf.commit(n);
        fed += n;
      }
      check(buf.size() <= kBufferLimit);
      ec = {};
      const size_t used = p->put(buf.data(), ec);
      buf.consume(used);
      if (used == 0 && !ec && !p->is_done()) ec = http::error::need_more;
      if (ec && ec != http::error::need_more) return 0;  // 400 / 413 / 431
      if (p->is_header_done() && !framing_checked) {
        framing_checked = true;
        const auto& m = p->get();
        const auto te = m.find(http::field::transfer_encoding);
        const std::string_view te_value =
            te == m.end() ? std::string_view()
                          : std::string_view(te->value().data(), te->value().size());
        int status = 0;
        const std::string why =
            mmrt::server::framing_error(te == m.end() ? nullptr : &te_value,
                                        m.find(http::field::content_length) != m.end(), status);
        if (!why.empty()) {
          check(status == 400 || status == 501);
          return 0;
        }
        check(!(te != m.end() && m.find(http::field::content_length) != m.end()));
      }
    }
    check(p->get().body().size() <= kBodyLimit);
    if (!p->keep_alive()) return 0;
  }
  return 0;
}
