// Internal to the HTTP layer (http.cpp, http_ws.cpp): the Boost.Beast types, the server's
// shared state and the hand-over of an upgraded connection to the WebSocket session. Nothing
// outside src/server/http*.cpp includes it.
#pragma once

#include <utility>
// clang-format off
#include "server/http.h"
// clang-format on

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <memory>
#include <string>
#include <vector>

#include "server/realtime_session.h"

namespace mmrt::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

struct HttpServer::Impl {
  HttpOptions opt;
  Handler handler;
  // Before the io_context: destroying it destroys pending handlers and their Sessions, which
  // count themselves out here.
  std::atomic<int64_t> connections{0};
  int bound_port = 0;
  net::io_context ioc;
  tcp::acceptor acceptor;
  net::signal_set signals;
  struct Ticker {
    Ticker(net::io_context& ioc, std::chrono::milliseconds p, std::function<void()> f)
        : timer(ioc), period(p), fn(std::move(f)) {}
    void arm() {
      timer.expires_after(period);
      timer.async_wait([this](const beast::error_code& ec) {
        if (ec) return;
        fn();
        arm();
      });
    }
    net::steady_timer timer;
    std::chrono::milliseconds period;
    std::function<void()> fn;
  };
  std::vector<std::unique_ptr<Ticker>> tickers;
  std::function<void(int)> signal_fn;
  net::steady_timer backoff;
  std::atomic<bool> accept_error_logged{false};

  Impl(const HttpOptions& o, Handler h)
      : opt(o),
        handler(std::move(h)),
        ioc(std::max(1, o.threads)),
        acceptor(net::make_strand(ioc)),
        signals(ioc),
        backoff(acceptor.get_executor()) {}
  void accept();
  void wait_signal() {
    signals.async_wait([this](const beast::error_code& ec, int sig) {
      if (ec) return;
      if (signal_fn) signal_fn(sig);
      wait_signal();
    });
  }
};

// Takes over an upgraded connection: accepts the WebSocket handshake of `req` (answering with
// `subprotocol` when not empty) and serves `ep` on it until either side closes.
void start_websocket(beast::tcp_stream&& stream, HttpServer::Impl& srv,
                     std::shared_ptr<WsEndpoint> ep, http::request<http::string_body> req,
                     std::string subprotocol);

}  // namespace mmrt::server
