#include "server/realtime_session.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "io/json_fields.h"
#include "media/audio.h"
#include "obs/report.h"
#include "server/api.h"

namespace mmrt::server {
namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

// A session.update or event field problem: the error event's param and message.
struct FieldError {
  std::string param, message;
};

}  // namespace

std::vector<models::ChatMessage> realtime_messages(const std::string& instructions,
                                                   size_t n_items) {
  std::vector<models::ChatMessage> m;
  if (!instructions.empty()) m.push_back(models::ChatMessage::text("system", instructions));
  models::ChatMessage user;
  user.role = "user";
  for (size_t i = 0; i < n_items; ++i)
    user.content.push_back({.kind = models::ContentPart::Kind::kAudio, .text = ""});
  m.push_back(std::move(user));
  return m;
}

RealtimeSession::RealtimeSession(RealtimeOptions opt, RealtimeSink& sink, std::string id,
                                 int64_t now_ns)
    : opt_(std::move(opt)), sink_(sink), id_(std::move(id)), last_event_ns_(now_ns) {
  reset_vad();
}

std::string RealtimeSession::next_id(const char* prefix) {
  return std::string(prefix) + "_" + id_ + "_" + std::to_string(++counter_);
}

void RealtimeSession::emit(ojson ev) {
  if (closed_) return;
  ojson out = {{"type", ev["type"]}, {"event_id", next_id("event")}};
  for (auto& [k, v] : ev.items())
    if (k != "type") out[k] = std::move(v);
  sink_.send(out.dump(-1, ' ', false, ojson::error_handler_t::replace));
}

void RealtimeSession::error(const std::string& type, const std::string& code,
                            const std::string& message, const std::string& param,
                            const std::string& event_id) {
  emit({{"type", "error"},
        {"error",
         {{"type", type},
          {"code", code.empty() ? ojson(nullptr) : ojson(code)},
          {"message", message},
          {"param", param.empty() ? ojson(nullptr) : ojson(param)},
          {"event_id", event_id.empty() ? ojson(nullptr) : ojson(event_id)}}}});
}

void RealtimeSession::reset_vad() {
  media::VadConfig c;
  c.sample_rate = rate_;
  c.grid_samples = rate_ / 25;  // 40 ms: one Qwen2-Audio token (640 samples at 16 kHz)
  c.min_silence_ms =
      vad_on_ ? std::min(opt_.segment_silence_ms, silence_ms_) : opt_.segment_silence_ms;
  c.prefix_padding_ms = vad_on_ ? prefix_padding_ms_ : 0;
  c.max_segment_ms = opt_.max_item_ms;
  vad_ = media::VoiceActivityDetector(c);
}

ojson RealtimeSession::session_json() const {
  ojson td = nullptr;
  if (vad_on_)
    td = {{"type", "server_vad"},
          {"threshold", threshold_},
          {"prefix_padding_ms", prefix_padding_ms_},
          {"silence_duration_ms", silence_ms_},
          {"create_response", true}};
  return {{"id", "sess_" + id_},
          {"object", "realtime.session"},
          {"model", opt_.model_id},
          {"modalities", {"text"}},
          {"instructions", instructions_},
          {"input_audio_format", "pcm16"},
          {"turn_detection", td},
          {"temperature", temperature_},
          {"max_response_output_tokens", max_tokens_ > 0 ? ojson(max_tokens_) : ojson("inf")},
          {"mmrt", {{"input_sample_rate", rate_}, {"segmented_prefill", segmented_}}}};
}

void RealtimeSession::start() {
  emit({{"type", "session.created"}, {"session", session_json()}});
}

int64_t RealtimeSession::buffered_samples() const {
  int64_t n = static_cast<int64_t>(open_.size());
  for (const auto& it : items_) n += it.end - it.begin;
  return n;
}

size_t RealtimeSession::in_flight() const {
  return (prefill_ != 0 ? 1 : 0) + (response_ != 0 ? 1 : 0);
}

bool AudioBudget::move(int64_t from_ms, int64_t to_ms) {
  const int64_t delta = to_ms - from_ms;
  if (delta <= 0) {
    held_ms_ += delta;
    return true;
  }
  int64_t held = held_ms_.load();
  do {
    if (held + delta > max_ms_) return false;
  } while (!held_ms_.compare_exchange_weak(held, held + delta));
  return true;
}

void RealtimeSession::sync_budget() {
  if (!opt_.budget) return;
  const int64_t now_ms = closed_ ? 0 : buffered_samples() * 1000 / rate_;
  // Growth was checked (and charged) by append; this settles what was freed (a shrink always
  // succeeds), or grows by what rounding left when the budget allows.
  if (opt_.budget->move(charged_ms_, now_ms)) charged_ms_ = now_ms;
}

void RealtimeSession::on_event(std::string_view text, int64_t now_ns) {
  if (closed_) return;
  handle_event(text, now_ns);
  sync_budget();
}

void RealtimeSession::handle_event(std::string_view text, int64_t now_ns) {
  last_event_ns_ = now_ns;
  if (static_cast<int64_t>(text.size()) > opt_.max_event_bytes)
    return error("invalid_request_error", "event_too_large",
                 "the event has " + std::to_string(text.size()) + " bytes, over the limit of " +
                     std::to_string(opt_.max_event_bytes) + " bytes per event",
                 "", "");
  json ev;
  try {
    ev = io::parse_json_object(text, "the client event");
  } catch (const Error& e) {
    return error("invalid_request_error", "invalid_json", e.what(), "", "");
  }
  std::string eid;
  if (auto it = ev.find("event_id"); it != ev.end() && it->is_string()) eid = *it;
  auto t = ev.find("type");
  if (t == ev.end() || !t->is_string())
    return error("invalid_request_error", "missing_type", "the event has no string field 'type'",
                 "type", eid);
  const std::string type = *t;
  if (type == "session.update") return session_update(ev, eid);
  if (type == "input_audio_buffer.append") return append(ev, eid, now_ns);
  if (type == "input_audio_buffer.commit") {
    commit(eid, now_ns);
    return;
  }
  if (type == "input_audio_buffer.clear") {
    clear_buffer();
    return emit({{"type", "input_audio_buffer.cleared"}});
  }
  if (type == "response.create") return create_response(eid, now_ns);
  if (type == "response.cancel") {
    if (response_ == 0)
      return error("invalid_request_error", "response_cancel_not_active",
                   "there is no response in progress to cancel", "", eid);
    cancel_requested_ = true;
    return sink_.cancel(response_);
  }
  // Named in a short, cleaned excerpt: a client's input is never echoed at length.
  error("invalid_request_error", "unsupported_event",
        "mmrt does not support the client event type " + io::json_excerpt(*t) +
            " (supported: session.update, input_audio_buffer.append / commit / clear, "
            "response.create, response.cancel)",
        "type", eid.size() <= 64 ? eid : "");
}

void RealtimeSession::session_update(const json& ev, const std::string& eid) {
  auto s = ev.find("session");
  if (s == ev.end() || !s->is_object())
    return error("invalid_request_error", "invalid_value",
                 "session.update needs an object 'session'", "session", eid);
  // Everything is checked before anything changes.
  std::string instructions = instructions_;
  int32_t rate = rate_;
  bool vad_on = vad_on_, segmented = segmented_;
  int32_t silence = silence_ms_, padding = prefix_padding_ms_, max_tokens = max_tokens_;
  double threshold = threshold_, temperature = temperature_;
  auto integer = [](const json& v, int64_t lo, int64_t hi, int32_t& out) {
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) return false;
    out = static_cast<int32_t>(v.get<int64_t>());
    return true;
  };
  auto number = [](const json& v, double lo, double hi, double& out) {
    if (!v.is_number() || !(v.get<double>() >= lo && v.get<double>() <= hi)) return false;
    out = v.get<double>();
    return true;
  };
  std::optional<FieldError> bad;
  auto fail = [&](std::string param, std::string msg) {
    if (!bad) bad = FieldError{"session." + param, std::move(msg)};
  };
  const json& S = *s;
  if (auto it = S.find("instructions"); it != S.end()) {
    if (it->is_string())
      instructions = *it;
    else
      fail("instructions", "instructions must be a string");
  }
  if (auto it = S.find("input_audio_format"); it != S.end() && *it != "pcm16")
    fail("input_audio_format", "input_audio_format " + io::json_excerpt(*it) +
                                   " is not supported: mmrt takes pcm16 only");
  if (auto it = S.find("modalities"); it != S.end()) {
    if (!it->is_array() || *it != json::array({"text"}))
      fail("modalities", "mmrt answers with text only: modalities must be [\"text\"], not " +
                             io::json_excerpt(*it));
  }
  if (auto it = S.find("turn_detection"); it != S.end()) {
    if (it->is_null()) {
      vad_on = false;
    } else if (!it->is_object()) {
      fail("turn_detection", "turn_detection must be an object or null");
    } else {
      vad_on = true;
      const json& T = *it;
      if (auto ty = T.find("type"); ty != T.end() && *ty != "server_vad")
        fail("turn_detection.type", "turn_detection.type " + io::json_excerpt(*ty) +
                                        " is not supported (mmrt: server_vad)");
      if (auto v = T.find("silence_duration_ms"); v != T.end() && !integer(*v, 100, 10000, silence))
        fail("turn_detection.silence_duration_ms", "silence_duration_ms must be 100..10000");
      if (auto v = T.find("prefix_padding_ms"); v != T.end() && !integer(*v, 0, 5000, padding))
        fail("turn_detection.prefix_padding_ms", "prefix_padding_ms must be 0..5000");
      if (auto v = T.find("threshold"); v != T.end() && !number(*v, 0, 1, threshold))
        fail("turn_detection.threshold", "threshold must be a number in [0, 1]");
      if (auto v = T.find("create_response"); v != T.end() && *v != true)
        fail("turn_detection.create_response",
             "mmrt always creates a response when server_vad commits a turn");
    }
  }
  if (auto it = S.find("max_response_output_tokens"); it != S.end()) {
    if (*it == "inf")
      max_tokens = 0;
    else if (!integer(*it, 1, 4096, max_tokens))
      fail("max_response_output_tokens", "max_response_output_tokens must be 1..4096 or \"inf\"");
  }
  for (const char* unsupported : {"tools", "tool_choice", "voice", "output_audio_format"})
    if (auto it = S.find(unsupported);
        it != S.end() && !it->is_null() && !(it->is_array() && it->empty()) &&
        !(std::string(unsupported) == "tool_choice" && *it == "none"))
      fail(unsupported, std::string(unsupported) +
                            " is not supported: mmrt's Realtime sessions answer with text, "
                            "without tools (got " +
                            io::json_excerpt(*it) + ")");
  if (auto it = S.find("temperature"); it != S.end() && !number(*it, 0, 2, temperature))
    fail("temperature", "temperature must be a number in [0, 2] (0: greedy)");
  if (auto it = S.find("mmrt"); it != S.end()) {
    if (!it->is_object()) fail("mmrt", "mmrt must be an object");
    if (it->is_object()) {
      if (auto v = it->find("input_sample_rate");
          v != it->end() && (!integer(*v, 16000, 24000, rate) || (rate != 16000 && rate != 24000)))
        fail("mmrt.input_sample_rate", "input_sample_rate must be 16000 or 24000 (Hz)");
      if (auto v = it->find("segmented_prefill"); v != it->end()) {
        if (v->is_boolean())
          segmented = *v;
        else
          fail("mmrt.segmented_prefill", "segmented_prefill must be a boolean");
      }
    }
  }
  const bool audio_changes =
      rate != rate_ || vad_on != vad_on_ || silence != silence_ms_ || padding != prefix_padding_ms_;
  if (!bad && audio_changes && (stream_pos_ > 0 || !items_.empty()))
    bad = FieldError{"session",
                     "input_sample_rate and turn_detection cannot change once audio has been "
                     "appended in this session"};
  if (bad) return error("invalid_request_error", "invalid_value", bad->message, bad->param, eid);
  instructions_ = std::move(instructions);
  rate_ = rate;
  vad_on_ = vad_on;
  segmented_ = segmented;
  silence_ms_ = silence;
  prefix_padding_ms_ = padding;
  max_tokens_ = max_tokens;
  threshold_ = threshold;
  temperature_ = temperature;
  if (audio_changes) reset_vad();
  emit({{"type", "session.updated"}, {"session", session_json()}});
}

engine::GenerateRequest RealtimeSession::request_for(size_t n, int32_t max_tokens,
                                                     double temp) const {
  engine::GenerateRequest g;
  g.messages = realtime_messages(instructions_, n);
  for (size_t i = 0; i < n; ++i) g.media.push_back({models::Modality::kAudio, items_[i].wav, {}});
  g.sampling.max_tokens = max_tokens;
  g.sampling.temperature = static_cast<float>(temp);
  g.tenant = opt_.tenant;
  return g;
}

void RealtimeSession::maybe_prefill() {
  if (!segmented_ || closed_ || prefill_ != 0 || items_.empty()) return;
  // Items cut since the last prefill (by id order: ids grow with the counter).
  if (prefill_items_ > 0 && items_.size() <= prefill_items_) return;
  prefill_ = ++counter_;
  prefill_items_ = items_.size();
  ++prefills_;
  sink_.submit(prefill_, request_for(items_.size(), 1, 0), {next_id("prefill"), true});
}

void RealtimeSession::create_response(const std::string& eid, int64_t now_ns) {
  if (response_ != 0)
    return error("invalid_request_error", "conversation_already_has_active_response",
                 "a response is already in progress (response.cancel ends it)", "", eid);
  if (committed_ == 0)
    return error("invalid_request_error", "input_audio_buffer_not_committed",
                 "no committed audio to respond to: send input_audio_buffer.commit first", "", eid);
  response_ = ++counter_;
  response_id_ = next_id("resp");
  response_item_ = next_id("item");
  response_text_.clear();
  cancel_requested_ = false;
  response_spans_.clear();
  for (size_t i = 0; i < committed_; ++i)
    response_spans_.emplace_back(items_[i].begin, items_[i].end);
  engine::GenerateRequest g = request_for(
      committed_, max_tokens_ > 0 ? max_tokens_ : opt_.default_max_tokens, temperature_);
  // The committed items leave the conversation (one turn per response); later ones stay.
  items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(committed_));
  prefill_items_ = prefill_items_ > committed_ ? prefill_items_ - committed_ : 0;
  committed_ = 0;
  response_submit_ns_ = now_ns;
  emit({{"type", "response.created"},
        {"response",
         {{"id", response_id_},
          {"object", "realtime.response"},
          {"status", "in_progress"},
          {"status_details", nullptr},
          {"output", ojson::array()},
          {"usage", nullptr}}}});
  sink_.submit(response_, std::move(g), {response_id_, false});
}

void RealtimeSession::on_text(uint64_t ticket, const std::string& text) {
  if (closed_ || ticket != response_ || text.empty()) return;
  response_text_ += text;
  emit({{"type", "response.text.delta"},
        {"response_id", response_id_},
        {"item_id", response_item_},
        {"output_index", 0},
        {"content_index", 0},
        {"delta", text}});
}

void RealtimeSession::on_done(uint64_t ticket, const engine::RequestResult& r, int64_t now_ns) {
  handle_done(ticket, r, now_ns);
  sync_budget();
}

void RealtimeSession::handle_done(uint64_t ticket, const engine::RequestResult& r, int64_t now_ns) {
  if (ticket == prefill_) {
    prefill_ = 0;
    if (!closed_) maybe_prefill();
    return;
  }
  if (ticket != response_ || closed_) return;
  response_ = 0;
  const bool ok = r.outcome == engine::Outcome::kFinished || r.outcome == engine::Outcome::kStopped;
  std::string status = "completed";
  ojson details = nullptr;
  if (r.outcome == engine::Outcome::kFinished) {
    status = "incomplete";
    details = {{"type", "incomplete"}, {"reason", "max_output_tokens"}};
  } else if (r.outcome == engine::Outcome::kCancelled) {
    status = "cancelled";
    details = {{"type", "cancelled"},
               {"reason", cancel_requested_ ? "client_cancelled" : "turn_detected"}};
  } else if (!ok) {
    status = "failed";
    const ApiError e = from_error_code(r.error.value_or(ErrorCode::kInternal), r.reason);
    details = {{"type", "failed"},
               {"error",
                {{"type", e.type},
                 {"code", e.code.empty() ? ojson(nullptr) : ojson(e.code)},
                 {"message", e.what()}}}};
  }
  if (ok)
    emit({{"type", "response.text.done"},
          {"response_id", response_id_},
          {"item_id", response_item_},
          {"output_index", 0},
          {"content_index", 0},
          {"text", response_text_}});
  const int64_t out_tokens = static_cast<int64_t>(r.tokens.size());
  ojson spans = ojson::array();
  for (const auto& [b, e] : response_spans_) spans.push_back({b, e});
  const obs::RequestTimes t = obs::request_times(r);
  // From the response's submission: at the commit (server_vad) or at response.create.
  const double ttft_ms = t.ttft * 1e3;
  ojson output = ojson::array();
  if (ok)
    output.push_back({{"id", response_item_},
                      {"object", "realtime.item"},
                      {"type", "message"},
                      {"status", "completed"},
                      {"role", "assistant"},
                      {"content", {{{"type", "text"}, {"text", response_text_}}}}});
  emit({{"type", "response.done"},
        {"response",
         {{"id", response_id_},
          {"object", "realtime.response"},
          {"status", status},
          {"status_details", details},
          {"output", output},
          {"usage",
           {{"total_tokens", r.prompt_tokens + out_tokens},
            {"input_tokens", r.prompt_tokens},
            {"output_tokens", out_tokens},
            {"input_token_details", {{"cached_tokens", r.cached_prompt_tokens}}},
            {"output_token_details", {{"text_tokens", out_tokens}, {"audio_tokens", 0}}}}},
          {"mmrt",
           {{"items", spans},
            {"sample_rate", rate_},
            {"ttft_ms", std::round(ttft_ms * 1e3) / 1e3},
            {"prefills", prefills_},
            {"request_id", r.id},
            {"trace", "/v1/requests/" + response_id_ + "/trace"}}}}}});
  (void)now_ns;
  response_text_.clear();
  // A turn server_vad committed while this response ran is answered now.
  if (vad_on_ && committed_ > 0) create_response("", now_ns);
}

void RealtimeSession::tick(int64_t now_ns) {
  // A response in progress is the server's turn, not the client's idleness: the clock starts
  // again when it ends.
  if (response_ != 0 || prefill_ != 0) last_event_ns_ = std::max(last_event_ns_, now_ns);
  if (closed_ || now_ns - last_event_ns_ < opt_.idle_timeout_ms * 1'000'000) return;
  error("invalid_request_error", "session_idle_timeout",
        "no client event for " + std::to_string(opt_.idle_timeout_ms / 1000) +
            " s: the session is closed",
        "", "");
  sink_.close(1000, "idle timeout");
  close();
}

void RealtimeSession::close() {
  if (closed_) return;
  closed_ = true;
  if (prefill_ != 0) sink_.cancel(prefill_);
  if (response_ != 0) sink_.cancel(response_);
  prefill_ = response_ = 0;
  std::vector<int16_t>().swap(open_);
  std::vector<RealtimeItem>().swap(items_);
  committed_ = 0;
  sync_budget();
}

}  // namespace mmrt::server
