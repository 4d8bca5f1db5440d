// One Realtime WebSocket connection (GET /v1/realtime): the transport's endpoint and the
// session's sink, between the WebSocket, the RealtimeSession and the engine. Everything runs on
// the connection's strand; the engine's notify posts a drain there. Every request's timeline is
// kept as a trace, and a response's outcome and stages go to the metrics as an HTTP request's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "engine/handle.h"
#include "server/realtime_session.h"
#include "server/service.h"

namespace mmrt::server {

class RealtimeConnection final : public WsEndpoint,
                                 public RealtimeSink,
                                 public std::enable_shared_from_this<RealtimeConnection> {
 public:
  RealtimeConnection(Service& svc, uint64_t key, std::string id, RealtimeOptions opt);
  ~RealtimeConnection() override;  // cancels what still runs

  // WsEndpoint.
  void on_open(std::shared_ptr<WsChannel> ch) override;
  void on_text(std::string text) override;
  void on_close() override;
  // From the service's tick (any thread): the session's idle timeout, on the strand.
  void post_tick();

  // RealtimeSink.
  void send(std::string ev) override;
  void submit(uint64_t ticket, engine::GenerateRequest req, RealtimeJob job) override;
  void cancel(uint64_t ticket) override;
  void close(uint16_t code, std::string reason) override;

 private:
  void drain(uint64_t ticket);  // the request's new text, and its end
  void record(uint64_t ticket, const engine::RequestResult& r);

  Service& svc_;
  uint64_t key_;
  std::string id_;
  RealtimeOptions opt_;
  std::shared_ptr<WsChannel> ch_;
  std::unique_ptr<RealtimeSession> session_;
  std::map<uint64_t, engine::RequestHandle> handles_;
  std::map<uint64_t, RealtimeJob> jobs_;  // what each handle's request is
  bool closed_ = false;
};

}  // namespace mmrt::server
