// Streaming audio input over a WebSocket, the OpenAI Realtime API's subset (beta event names):
// one RealtimeSession per connection, a transport-free state machine. It takes client event
// texts and answers with server event texts and engine actions through a RealtimeSink (the
// transport and the engine glue implement it; a test implements it with a fake).
//
// Audio (pcm16 at the session's input rate, 16000 or 24000 Hz) is cut into CONTIGUOUS items at
// the voice-activity detector's speech_stopped offsets (multiples of 40 ms, one Qwen2-Audio
// token at 16 kHz) and at most every 30 s: item k = samples [cut_{k-1}, cut_k) at the input
// rate, wrapped as a PCM16 mono WAV at that rate (the engine's decoder resamples it to 16 kHz,
// as it does for the same WAV sent to /v1/chat/completions). Each closed item is prefilled at
// once (segmented prefill: the prompt with the items so far, max_tokens 1; its KV stays in the
// prefix cache, its encoder outputs in the encoder cache), so at the end of the turn only the
// last item remains. The response's prompt is the one a chat completion with the same WAV items
// (+ the instructions as the system message) has: the greedy reply is the same token for token.
//
// Also declared here: the transport's WebSocket interfaces (http.cpp implements WsChannel and
// WsUpgradable; the service implements WsEndpoint).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "media/vad.h"

namespace mmrt::server {

// ---- transport ------------------------------------------------------------------------------

// The transport's side of one open WebSocket. Every method but post() runs on the connection's
// executor; post() may be called from any thread.
class WsChannel {
 public:
  virtual ~WsChannel() = default;
  virtual void send_text(std::string text) = 0;  // queued, written strictly in order
  // Sends a close frame after what is queued (code 1000 normal, 1008 policy, 1011 error).
  virtual void close(uint16_t code, std::string reason) = 0;
  virtual void post(std::function<void()> fn) = 0;  // onto the connection's strand
};

// The application's side: called on the connection's executor.
class WsEndpoint {
 public:
  virtual ~WsEndpoint() = default;
  virtual void on_open(std::shared_ptr<WsChannel> ch) = 0;
  virtual void on_text(std::string text) = 0;  // one text (or binary) message
  virtual void on_close() = 0;                 // the connection is gone (once)
};

// An HTTP exchange whose request asks for a WebSocket upgrade (Upgrade: websocket) also
// implements this: accept() answers 101 (echoing `subprotocol` when not empty) and hands the
// connection to `ep`. Otherwise the exchange is answered as usual (an error response).
class WsUpgradable {
 public:
  virtual ~WsUpgradable() = default;
  virtual void accept_websocket(std::shared_ptr<WsEndpoint> ep, std::string subprotocol) = 0;
};

// ---- session --------------------------------------------------------------------------------

// The audio all Realtime sessions of a server hold, against one budget (milliseconds of audio):
// shared by the sessions (thread-safe), owned by the server.
class AudioBudget {
 public:
  explicit AudioBudget(int64_t max_ms) : max_ms_(max_ms) {}
  // Moves a session's holding from `from_ms` to `to_ms`; growing past the budget fails and
  // changes nothing. Shrinking always succeeds.
  bool move(int64_t from_ms, int64_t to_ms);
  int64_t held_ms() const { return held_ms_.load(); }
  int64_t max_ms() const { return max_ms_; }

 private:
  std::atomic<int64_t> held_ms_{0};
  const int64_t max_ms_;
};

struct RealtimeOptions {
  std::string model_id = "mmrt";
  double max_buffer_seconds = 300;       // audio held (uncommitted + committed, not answered)
  double max_total_seconds = 3600;       // ... by all sessions of the server together
  int64_t max_event_bytes = 15ll << 20;  // one client event (OpenAI: 15 MiB)
  int32_t default_max_tokens = 256;      // max_response_output_tokens "inf" or unset
  int32_t segment_silence_ms = 400;      // a pause this long closes an item (<= silence_duration)
  int32_t max_item_ms = 30000;           // an item never exceeds the model's audio window
  int32_t min_item_ms = 100;             // ... nor is shorter (OpenAI's commit minimum)
  int64_t idle_timeout_ms = 600000;      // no client event for this long: error, then close
  std::string tenant = "default";
  // The server's, across sessions, of max_total_seconds (the server makes it; null: none).
  std::shared_ptr<AudioBudget> budget;
};

// What a submitted request is, for the server's books.
struct RealtimeJob {
  std::string trace_id;   // its timeline is kept as /v1/requests/{trace_id}/trace
  bool prefill = false;   // a segmented prefill (a response's own books: metrics per class)
  std::string sla_class;  // as asked (set by the connection)
};

// What a session asks of the world. Called synchronously from the session's methods.
class RealtimeSink {
 public:
  virtual ~RealtimeSink() = default;
  virtual void send(std::string event_json) = 0;  // one server event, in order
  // A request to run; its text comes back through on_text(ticket, ...) and its end through
  // on_done(ticket, ...), exactly once (also after cancel()).
  virtual void submit(uint64_t ticket, engine::GenerateRequest req, RealtimeJob job) = 0;
  virtual void cancel(uint64_t ticket) = 0;
  virtual void close(uint16_t code, std::string reason) = 0;  // end the connection
};

// One audio item of the current conversation.
struct RealtimeItem {
  std::string id;
  int64_t begin = 0, end = 0;  // samples at the input rate, from the session's stream start
  std::vector<uint8_t> wav;    // PCM16 mono WAV at the input rate
};

// The chat of a prompt: [system: instructions (when not empty)], [user: one audio part per
// item]. The segmented prefill's partial prompts and the response's use it alike.
std::vector<models::ChatMessage> realtime_messages(const std::string& instructions, size_t n_items);

class RealtimeSession {
 public:
  RealtimeSession(RealtimeOptions opt, RealtimeSink& sink, std::string id, int64_t now_ns);
  void start();  // session.created
  // One client event (a JSON text). Problems become error events; the session goes on.
  void on_event(std::string_view text, int64_t now_ns);
  void on_text(uint64_t ticket, const std::string& text);
  void on_done(uint64_t ticket, const engine::RequestResult& r, int64_t now_ns);
  void tick(int64_t now_ns);  // the idle timeout
  // The client went away (or the server shuts down): cancels what runs, frees the audio.
  void close();

  // For tests and metrics.
  const std::vector<RealtimeItem>& items() const { return items_; }  // cut, not yet answered
  size_t committed_items() const { return committed_; }
  int64_t buffered_samples() const;  // held audio at the input rate
  int64_t stream_samples() const { return stream_pos_; }
  int32_t input_rate() const { return rate_; }
  size_t in_flight() const;
  bool turn_detection() const { return vad_on_; }
  bool response_active() const { return response_ != 0; }
  uint64_t prefills_submitted() const { return prefills_; }

 private:
  void error(const std::string& type, const std::string& code, const std::string& message,
             const std::string& param, const std::string& event_id);
  void emit(nlohmann::ordered_json ev);
  nlohmann::ordered_json session_json() const;
  void handle_event(std::string_view text, int64_t now_ns);
  void handle_done(uint64_t ticket, const engine::RequestResult& r, int64_t now_ns);
  // Charges the audio held now to the server's budget (after every event and answer).
  void sync_budget();
  void session_update(const nlohmann::json& ev, const std::string& eid);
  void append(const nlohmann::json& ev, const std::string& eid, int64_t now_ns);
  void push_samples(std::span<const int16_t> s, int64_t now_ns);
  // Closes the open item at `at`; prefill: start its segmented prefill (not at a commit, where
  // the response that follows prefills it: two requests would decode the same item).
  void cut(int64_t at, bool prefill = true);
  int64_t min_item_samples() const;  // opt_.min_item_ms at the input rate
  // Joins the open audio (shorter than min_item_samples) to the last uncommitted item; where
  // that item would exceed the window, the boundary moves back so the tail is a minimal item.
  void absorb_short_tail();
  bool commit(const std::string& eid, int64_t now_ns);  // false: nothing to commit
  void clear_buffer();
  void create_response(const std::string& eid, int64_t now_ns);
  void maybe_prefill();
  engine::GenerateRequest request_for(size_t n_items, int32_t max_tokens, double temp) const;
  void reset_vad();
  std::string next_id(const char* prefix);

  RealtimeOptions opt_;
  RealtimeSink& sink_;
  std::string id_;
  uint64_t counter_ = 0;
  int64_t last_event_ns_ = 0;
  bool closed_ = false;
  int64_t charged_ms_ = 0;  // what this session holds in opt_.budget

  // Settings (session.update).
  std::string instructions_;
  int32_t rate_ = 24000;
  bool vad_on_ = true, segmented_ = true;
  int32_t silence_ms_ = 500, prefix_padding_ms_ = 300;
  double threshold_ = 0.5, temperature_ = 0.8;
  int32_t max_tokens_ = 0;  // 0: "inf" (the server's default)

  // Audio. The open item: samples [open_begin_, stream_pos_) in open_.
  media::VoiceActivityDetector vad_;
  int64_t stream_pos_ = 0, open_begin_ = 0;
  std::vector<int16_t> open_;
  std::vector<RealtimeItem> items_;  // closed: committed ones first
  size_t committed_ = 0;
  bool in_speech_ = false;
  int64_t last_stop_ = -1;  // server_vad: where the last speech stopped (-1: none since commit)
  std::string speech_item_;

  // Requests. Tickets: prefill (at most one) and response (at most one).
  uint64_t prefill_ = 0, response_ = 0, prefills_ = 0;
  size_t prefill_items_ = 0;  // items the prefill in flight covers
  std::string response_id_, response_item_, response_text_;
  int64_t response_submit_ns_ = 0;
  std::vector<std::pair<int64_t, int64_t>> response_spans_;
  bool cancel_requested_ = false;
};

}  // namespace mmrt::server
