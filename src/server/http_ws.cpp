// The WebSocket side of the HTTP layer (Boost.Beast): a session per upgraded connection.
// <utility> first: GCC 12 with -std=c++20 and Boost 1.74's asio needs std::exchange declared
// before any Boost header.
#include <utility>
// clang-format off
#include "server/http_impl.h"
// clang-format on

#include <boost/asio/post.hpp>
#include <deque>

namespace mmrt::server {
namespace {

// A WebSocket after the upgrade: text messages in, a strictly ordered write queue out, Beast's
// keep-alive pings and idle timeout, a message size limit; all on the connection's strand.
class WsSession final : public WsChannel, public std::enable_shared_from_this<WsSession> {
 public:
  static constexpr size_t kMaxMessageBytes = 16 << 20, kMaxQueuedBytes = 16 << 20;
  WsSession(beast::tcp_stream&& s, HttpServer::Impl& srv, std::shared_ptr<WsEndpoint> ep)
      : ws_(std::move(s)), srv_(srv), ep_(std::move(ep)) {
    ++srv_.connections;
  }
  ~WsSession() override { --srv_.connections; }
  void start(http::request<http::string_body> req, std::string subprotocol) {
    beast::get_lowest_layer(ws_).expires_never();  // the websocket's own timeouts from here
    auto t = websocket::stream_base::timeout::suggested(beast::role_type::server);
    t.idle_timeout = srv_.opt.idle_timeout;  // a ping at half of it (keep_alive_pings)
    ws_.set_option(t);
    ws_.set_option(websocket::stream_base::decorator(
        [sp = std::move(subprotocol)](websocket::response_type& res) {
          res.set(http::field::server, "mmrt");
          if (!sp.empty()) res.set(http::field::sec_websocket_protocol, sp);
        }));
    ws_.read_message_max(kMaxMessageBytes);
    ws_.text(true);
    ws_.async_accept(req, [self = shared_from_this()](const beast::error_code& ec) {
      if (ec) return self->finish();
      self->open_ = true;
      self->ep_->on_open(self);
      self->read();
    });
  }

  void send_text(std::string text) override {
    if (closed_ || closing_) return;
    queued_ += text.size();
    if (queued_ > kMaxQueuedBytes) {  // a client that stopped reading
      beast::error_code ec;
      beast::get_lowest_layer(ws_).socket().shutdown(tcp::socket::shutdown_both, ec);
      return;
    }
    q_.push_back(std::move(text));
    pump();
  }
  void close(uint16_t code, std::string reason) override {
    if (closed_ || closing_) return;
    closing_ = true;
    close_reason_ = websocket::close_reason(static_cast<websocket::close_code>(code), reason);
    pump();
  }
  void post(std::function<void()> fn) override { net::post(ws_.get_executor(), std::move(fn)); }

 private:
  void read() {
    ws_.async_read(rbuf_, [self = shared_from_this()](const beast::error_code& ec, size_t) {
      if (ec) return self->finish();
      std::string text = beast::buffers_to_string(self->rbuf_.data());
      self->rbuf_.consume(self->rbuf_.size());
      if (self->ep_) self->ep_->on_text(std::move(text));
      self->read();
    });
  }
  void pump() {
    if (writing_ || closed_) return;
    if (q_.empty()) {
      if (closing_ && !close_sent_) {
        close_sent_ = true;
        ws_.async_close(close_reason_, [self = shared_from_this()](const beast::error_code&) {});
      }
      return;
    }
    writing_ = true;
    inflight_ = std::move(q_.front());
    q_.pop_front();
    ws_.async_write(net::buffer(inflight_),
                    [self = shared_from_this()](const beast::error_code& ec, size_t) {
                      self->writing_ = false;
                      self->queued_ -= std::exchange(self->inflight_, {}).size();
                      if (ec) return self->finish();
                      self->pump();
                    });
  }
  void finish() {
    if (closed_) return;
    closed_ = true;
    q_.clear();
    queued_ = inflight_.size();
    if (auto ep = std::exchange(ep_, nullptr); ep && open_) ep->on_close();
  }

  websocket::stream<beast::tcp_stream> ws_;
  HttpServer::Impl& srv_;
  std::shared_ptr<WsEndpoint> ep_;
  beast::flat_buffer rbuf_;
  std::deque<std::string> q_;
  std::string inflight_;  // being written, out of q_ (which finish() may clear meanwhile)
  size_t queued_ = 0;     // bytes in q_ and in flight
  bool open_ = false, writing_ = false, closing_ = false, close_sent_ = false, closed_ = false;
  websocket::close_reason close_reason_;
};

}  // namespace

void start_websocket(beast::tcp_stream&& stream, HttpServer::Impl& srv,
                     std::shared_ptr<WsEndpoint> ep, http::request<http::string_body> req,
                     std::string subprotocol) {
  auto ws = std::make_shared<WsSession>(std::move(stream), srv, std::move(ep));
  ws->start(std::move(req), std::move(subprotocol));
}

}  // namespace mmrt::server
