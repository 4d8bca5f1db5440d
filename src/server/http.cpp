// The HTTP/1.1 side of the layer (Boost.Beast, here and in http_ws.cpp only: it is slow to
// compile). <utility> first: GCC 12 with -std=c++20 and Boost 1.74's asio needs std::exchange
// declared before any Boost header.
#include <utility>
// clang-format off
#include "server/http_impl.h"
// clang-format on

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <csignal>
#include <cstdio>
#include <deque>
#include <optional>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "server/http_framing.h"
#include "server/realtime_session.h"

namespace mmrt::server {

namespace {

std::string status_line(int status) {
  const auto reason = http::obsolete_reason(static_cast<http::status>(status));
  return "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason.data(), reason.size()) +
         "\r\n";
}

bool says_close(const Headers& h) {
  return std::any_of(h.begin(), h.end(), [](const auto& kv) {
    return (kv.first == "connection" || kv.first == "Connection") && kv.second == "close";
  });
}

class Session;

class ExchangeImpl final : public Exchange, public WsUpgradable {
 public:
  ExchangeImpl(std::weak_ptr<Session> s, net::any_io_executor ex)
      : s_(std::move(s)), ex_(std::move(ex)) {}
  void respond(HttpResponse r) override;
  void begin_stream(HttpResponse header) override;
  void write(std::string data) override;
  void end_stream() override;
  void on_abort(std::function<void()> fn) override {
    if (aborted_) {
      fn();
      return;
    }
    abort_fn_ = std::move(fn);
  }
  bool aborted() const override { return aborted_; }
  void post(std::function<void()> fn) override { net::post(ex_, std::move(fn)); }
  size_t pending_bytes() const override;
  void accept_websocket(std::shared_ptr<WsEndpoint> ep, std::string subprotocol) override;

  // The session's side.
  void abort() {
    if (ended_ || aborted_) return;
    aborted_ = true;
    if (abort_fn_) std::exchange(abort_fn_, nullptr)();
  }
  bool ended() const { return ended_; }

 private:
  std::weak_ptr<Session> s_;
  net::any_io_executor ex_;
  bool ended_ = false, aborted_ = false, streaming_ = false;
  std::function<void()> abort_fn_;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket s, HttpServer::Impl& srv)
      : stream_(std::move(s)),
        srv_(srv),
        timer_(stream_.get_executor()),
        buffer_(srv.opt.header_limit + kFramingSlack) {
    ++srv_.connections;
  }
  ~Session() { --srv_.connections; }
  void start() {
    net::dispatch(stream_.get_executor(),
                  [self = shared_from_this()] { self->wait_request(true); });
  }

  // ---- called by the exchange (on this session's strand) ----
  void send(std::string bytes) {
    if (closed_) return;
    if (!out_pending_.empty() && out_pending_.size() + bytes.size() > kMaxPendingBytes) {
      // A client that stopped reading: its request ends, the connection closes.
      if (exchange_) exchange_->abort();
      return close();
    }
    out_pending_ += bytes;
    pump();
  }
  static constexpr size_t kMaxPendingBytes = 16 << 20;
  void set_close() { keep_alive_ = false; }
  bool chunked() const { return chunked_; }
  size_t pending() const { return out_pending_.size() + out_flight_.size(); }
  void exchange_ended() { pump(); }
  // The exchange's request asked for a WebSocket: the connection becomes one.
  bool upgrade(std::shared_ptr<WsEndpoint> ep, std::string subprotocol) {
    if (closed_ || !upgrade_req_ || !out_pending_.empty() || writing_) return false;
    closed_ = true;  // this HTTP session lets go of the socket
    disarm();
    exchange_.reset();
    start_websocket(std::move(stream_), srv_, std::move(ep), std::move(*upgrade_req_),
                    std::move(subprotocol));
    upgrade_req_.reset();
    return true;
  }

 private:
  // A deadline for the read in progress: when it passes, the read is cancelled and
  // timed_out_ tells why (the socket stays open for a 408, unlike the stream's own timeouts).
  void arm(std::chrono::milliseconds limit) {
    timed_out_ = false;
    timer_.expires_after(limit);
    timer_.async_wait([weak = weak_from_this(), gen = ++timer_gen_](const beast::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || self->closed_ || gen != self->timer_gen_) return;
      self->timed_out_ = true;
      beast::error_code cec;
      self->stream_.socket().cancel(cec);
    });
  }

  // Waits for the first byte of the next request (idle limit), then reads it (read limit).
  void disarm() {
    ++timer_gen_;  // a wait that already fired finds another generation and does nothing
    timer_.cancel();
  }

  void wait_request(bool first) {
    if (buffer_.size() > 0) return read_request();
    arm(first ? srv_.opt.read_timeout : srv_.opt.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](const beast::error_code& ec, size_t n) {
                              self->disarm();
                              self->received(n);
                              if (ec) return self->close();  // idle or gone: nothing to answer
                              self->read_request();
                            });
  }

  // n bytes read into the buffer: the first of them is the arrival of the request they begin
  // when nothing was buffered before.
  void received(size_t n) {
    if (n > 0 && buffer_.size() == 0) first_byte_ns_ = now_ns();
    buffer_.commit(n);
  }

  // The header first: its framing is checked before any of the body is read.
  void read_request() {
    if (first_byte_ns_ == 0) first_byte_ns_ = now_ns();
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(srv_.opt.header_limit));
    parser_->body_limit(srv_.opt.body_limit);
    arm(srv_.opt.read_timeout);  // one deadline for the header and the body
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](const beast::error_code& ec, size_t) {
          if (ec) {
            self->disarm();
            return self->on_read(self->timed_out_ ? beast::error::timeout : ec);
          }
          int status = 0;
          const std::string why = framing_error(self->parser_->get(), status);
          if (!why.empty()) {
            self->disarm();
            return self->fail_request(status, why);
          }
          http::async_read(self->stream_, self->buffer_, *self->parser_,
                           [self](const beast::error_code& ec2, size_t) {
                             self->disarm();
                             // A request that completed wins over a deadline that fired with it.
                             self->on_read(ec2 && self->timed_out_ ? beast::error::timeout : ec2);
                           });
        });
  }

  // The transfer framing of the header just read (http_framing.h).
  static std::string framing_error(const http::request<http::string_body>& m, int& status) {
    const auto te = m.find(http::field::transfer_encoding);
    const std::string_view te_value =
        te == m.end() ? std::string_view()
                      : std::string_view(te->value().data(), te->value().size());
    return server::framing_error(te == m.end() ? nullptr : &te_value,
                                 m.find(http::field::content_length) != m.end(), status);
  }

  void fail_request(int status, const std::string& message) {
    keep_alive_ = false;
    std::string body = "{\"error\":{\"message\":\"" + message +
                       "\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}";
    send(status_line(status) + "Content-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n" +
         (status == 408 ? "" : "x-should-retry: false\r\n") + "\r\n" + body);
  }

  void on_read(const beast::error_code& ec) {
    if (ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset)
      return close();
    if (ec == beast::error::timeout)
      return fail_request(408, "the request took too long to arrive");
    if (ec == http::error::body_limit)
      return fail_request(413, "the request body exceeds the server's limit of " +
                                   std::to_string(srv_.opt.body_limit) + " bytes");
    if (ec == http::error::header_limit)
      return fail_request(
          431, "the request headers exceed " + std::to_string(srv_.opt.header_limit) + " bytes");
    if (ec == http::error::buffer_overflow)
      return fail_request(400,
                          "a chunk-size line (with its extensions) or the trailer section "
                          "exceeds " +
                              std::to_string(kFramingSlack) + " bytes");
    if (ec) return fail_request(400, "malformed HTTP request (" + ec.message() + ")");
    auto msg = parser_->release();
    parser_.reset();
    HttpRequest req;
    req.arrival_ns = first_byte_ns_;
    req.read_ns = now_ns();
    // Bytes already buffered belong to the next (pipelined) request: they arrived by now.
    first_byte_ns_ = buffer_.size() > 0 ? req.read_ns : 0;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    for (const auto& f : msg) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      req.headers.emplace_back(std::move(name), std::string(f.value()));
    }
    const bool upgrade = websocket::is_upgrade(msg);
    req.body = std::move(msg.body());
    keep_alive_ = msg.keep_alive();
    chunked_ = msg.version() >= 11;
    exchange_ = std::make_shared<ExchangeImpl>(weak_from_this(), stream_.get_executor());
    if (upgrade) {
      // No watching read: the socket may become a WebSocket (the client waits for the 101).
      upgrade_req_ = std::move(msg);
      keep_alive_ = false;  // answered with an error instead: closed after it
    } else {
      watch();
    }
    srv_.handler(std::move(req), exchange_);
  }

  // While an exchange is open, a read notices the client going away (and buffers pipelined
  // requests, up to the header limit).
  void watch() {
    if (watching_ || closed_ || buffer_.size() > srv_.opt.header_limit) return;
    watching_ = true;
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](const beast::error_code& ec, size_t n) {
                              self->watching_ = false;
                              self->received(n);
                              if (ec && ec != net::error::operation_aborted) {
                                if (self->exchange_) self->exchange_->abort();
                                return self->close();
                              }
                              if (self->want_next_) {
                                self->want_next_ = false;
                                return self->wait_request(false);
                              }
                              if (self->exchange_) self->watch();
                            });
  }

  void pump() {
    if (writing_ || closed_) return;
    if (out_pending_.empty()) {
      if (exchange_ && exchange_->ended())
        finish_exchange();
      else if (!exchange_ && !keep_alive_)
        close();
      return;
    }
    writing_ = true;
    out_flight_.swap(out_pending_);
    out_pending_.clear();
    net::async_write(stream_, net::buffer(out_flight_),
                     [self = shared_from_this()](const beast::error_code& ec, size_t) {
                       self->writing_ = false;
                       self->out_flight_.clear();
                       if (ec) {
                         if (self->exchange_) self->exchange_->abort();
                         return self->close();
                       }
                       self->pump();
                     });
  }

  void finish_exchange() {
    exchange_.reset();
    if (!keep_alive_) return close();
    if (watching_) {
      want_next_ = true;
      stream_.cancel();  // the watch's read ends; it then waits for the next request
      return;
    }
    wait_request(false);
  }

  // Whoever closes (the client, an error, a protocol violation, the server stopping), an open
  // exchange is aborted: its request is cancelled and its memory freed now, not when it ends.
  void close() {
    if (closed_) return;
    closed_ = true;
    if (exchange_) exchange_->abort();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
    exchange_.reset();
    timer_.cancel();
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& srv_;
  net::steady_timer timer_;
  bool timed_out_ = false;
  uint64_t timer_gen_ = 0;
  beast::flat_buffer buffer_;
  int64_t first_byte_ns_ = 0;  // arrival of the request the buffer begins (0: none yet)
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<ExchangeImpl> exchange_;
  std::optional<http::request<http::string_body>> upgrade_req_;
  std::string out_pending_, out_flight_;
  bool writing_ = false, watching_ = false, want_next_ = false, closed_ = false;
  bool keep_alive_ = true, chunked_ = true;
};

std::string serialize_head(const HttpResponse& r, bool close, const char* framing) {
  std::string s = status_line(r.status);
  s += "Content-Type: " + r.content_type + "\r\n";
  for (const auto& [k, v] : r.headers)
    if (k != "connection" && k != "Connection") s += k + ": " + v + "\r\n";
  s += framing;
  if (close) s += "Connection: close\r\n";
  return s + "\r\n";
}

void ExchangeImpl::respond(HttpResponse r) {
  if (std::exchange(ended_, true)) return;
  auto s = s_.lock();
  if (!s) return;
  if (says_close(r.headers)) s->set_close();
  const std::string framing = "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  s->send(serialize_head(r, says_close(r.headers), framing.c_str()) + r.body);
  s->exchange_ended();
}

void ExchangeImpl::begin_stream(HttpResponse r) {
  if (ended_ || std::exchange(streaming_, true)) return;
  auto s = s_.lock();
  if (!s) return;
  if (says_close(r.headers) || !s->chunked()) s->set_close();
  s->send(serialize_head(r, says_close(r.headers) || !s->chunked(),
                         s->chunked() ? "Transfer-Encoding: chunked\r\n" : ""));
}

void ExchangeImpl::write(std::string data) {
  if (ended_ || !streaming_ || data.empty()) return;
  auto s = s_.lock();
  if (!s) return;
  if (!s->chunked()) return s->send(std::move(data));
  char hex[24];
  std::snprintf(hex, sizeof hex, "%zx\r\n", data.size());
  s->send(hex + data + "\r\n");
}

void ExchangeImpl::end_stream() {
  if (std::exchange(ended_, true)) return;
  auto s = s_.lock();
  if (!s) return;
  if (streaming_ && s->chunked()) s->send("0\r\n\r\n");
  s->exchange_ended();
}

void ExchangeImpl::accept_websocket(std::shared_ptr<WsEndpoint> ep, std::string subprotocol) {
  auto s = s_.lock();
  if (ended_ || !s) return;
  if (s->upgrade(std::move(ep), std::move(subprotocol))) ended_ = true;
  if (!ended_) respond({400, "text/plain", {{"Connection", "close"}}, "no WebSocket upgrade\n"});
}

size_t ExchangeImpl::pending_bytes() const {
  auto s = s_.lock();
  return s ? s->pending() : 0;
}

}  // namespace

void HttpServer::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](const beast::error_code& ec,
                                                      tcp::socket sock) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      if (connections.load() >= opt.max_connections) {
        static const char kBusy[] =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n"
            "Connection: close\r\n\r\n";
        beast::error_code wec;
        sock.non_blocking(true, wec);
        net::write(sock, net::buffer(kBusy, sizeof kBusy - 1), wec);
        sock.close(wec);
      } else {
        beast::error_code nec;
        sock.set_option(tcp::no_delay(true), nec);
        std::make_shared<Session>(std::move(sock), *this)->start();
      }
    } else {
      // Out of descriptors (EMFILE) or memory: accepting again at once would spin; the
      // connections already open go on being served.
      if (!accept_error_logged.exchange(true))
        std::fprintf(stderr, "mmrt serve: cannot accept connections: %s\n", ec.message().c_str());
      backoff.expires_after(std::chrono::milliseconds(20));
      backoff.async_wait([this](const beast::error_code& wec) {
        if (!wec) accept();
      });
      return;
    }
    accept();
  });
}

HttpServer::HttpServer(const HttpOptions& opt, Handler handler)
    : impl_(std::make_unique<Impl>(opt, std::move(handler))) {
  Impl& m = *impl_;
  beast::error_code ec;
  const auto addr = net::ip::make_address(opt.host, ec);
  if (ec)
    throw InvalidArgument("--host " + opt.host + " is not an IP address (" + ec.message() + ")");
  const tcp::endpoint ep(addr, static_cast<unsigned short>(opt.port));
  m.acceptor.open(ep.protocol(), ec);
  if (!ec) m.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(ep, ec);
  if (!ec) m.acceptor.listen(opt.backlog, ec);
  if (ec)
    throw Unavailable("cannot listen on " + opt.host + ":" + std::to_string(opt.port) + ": " +
                      ec.message());
  m.bound_port = m.acceptor.local_endpoint(ec).port();
  m.accept();
}

HttpServer::~HttpServer() = default;

int HttpServer::port() const {
  return impl_->bound_port;
}

void HttpServer::run() {
  std::vector<std::thread> extra;
  for (int i = 1; i < impl_->opt.threads; ++i) extra.emplace_back([this] { impl_->ioc.run(); });
  impl_->ioc.run();
  for (auto& t : extra) t.join();
}

void HttpServer::stop_accepting() {
  net::post(impl_->acceptor.get_executor(), [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  });
}

void HttpServer::stop() {
  impl_->ioc.stop();
}

void HttpServer::every(std::chrono::milliseconds period, std::function<void()> fn) {
  impl_->tickers.push_back(std::make_unique<Impl::Ticker>(impl_->ioc, period, std::move(fn)));
  Impl::Ticker* t = impl_->tickers.back().get();
  net::post(impl_->ioc, [t] { t->arm(); });
}

void HttpServer::on_signal(std::function<void(int)> fn) {
  impl_->signal_fn = std::move(fn);
  impl_->signals.add(SIGINT);
  impl_->signals.add(SIGTERM);
  impl_->wait_signal();
}

int64_t HttpServer::connections() const {
  return impl_->connections.load();
}

}  // namespace mmrt::server
