// The HTTP/1.1 layer (Boost.Beast, kept in http*.cpp alone): an event loop that accepts
// connections, reads one request at a time per connection (keep-alive, pipelining), enforces the
// header, body and read-time limits, and hands each request to a Handler with an Exchange to
// answer through: a whole response, or a chunked stream (SSE). The Handler runs on an I/O
// thread and must not block; work elsewhere comes back through Exchange::post. A client that
// goes away while its exchange is open is reported through on_abort at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mmrt::server {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method, target, body;
  // now_ns() when the request's first byte was read (a pipelined request: when its first byte
  // reached the server's buffer) and when its headers and body were complete: the origin of
  // its deadline, TTFT and E2E, and the end of its http_read stage.
  int64_t arrival_ns = 0, read_ns = 0;
  Headers headers;  // names in lower case
  const std::string* header(const std::string& lower_name) const;
  std::string path() const;  // target without the query
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  Headers headers;
  std::string body;
};

// One request's answer. Every method must be called on the exchange's own executor (the
// handler's thread, or inside post()); post() may be called from any thread.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual void respond(HttpResponse r) = 0;            // the whole response; ends the exchange
  virtual void begin_stream(HttpResponse header) = 0;  // status and headers; chunks follow
  virtual void write(std::string data) = 0;            // one chunk of the stream
  virtual void end_stream() = 0;                       // ends the exchange
  // `fn` runs once if the client disconnects before the exchange ends (on the executor).
  virtual void on_abort(std::function<void()> fn) = 0;
  virtual bool aborted() const = 0;
  virtual void post(std::function<void()> fn) = 0;
  // Bytes written to the client and not yet acknowledged by the kernel's send (backpressure).
  virtual size_t pending_bytes() const = 0;
};

using Handler = std::function<void(HttpRequest, std::shared_ptr<Exchange>)>;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see HttpServer::port)
  int threads = 2;  // a second thread keeps /health answering while one formats streams
  size_t header_limit = 16 << 10;
  size_t body_limit = 64 << 20;
  std::chrono::milliseconds read_timeout{30000};  // a request's headers and body
  std::chrono::milliseconds idle_timeout{60000};  // between keep-alive requests
  int max_connections = 4096;
  int backlog = 4096;
};

class HttpServer {
 public:
  // Binds and listens (InvalidArgument / Unavailable naming the address on failure).
  HttpServer(const HttpOptions& opt, Handler handler);
  ~HttpServer();
  int port() const;
  // Runs the event loop on opt.threads threads (this one included) until stop().
  void run();
  // Stops accepting new connections; open ones go on.
  void stop_accepting();
  // Ends the event loop (open connections are closed).
  void stop();
  // Runs `fn` on the event loop every `period` until stop().
  void every(std::chrono::milliseconds period, std::function<void()> fn);
  // Calls `fn` on the event loop for SIGINT and SIGTERM (the default handlers are replaced).
  void on_signal(std::function<void(int)> fn);
  int64_t connections() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::server
