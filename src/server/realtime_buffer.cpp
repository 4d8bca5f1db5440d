// The Realtime session's input audio buffer: appends, the cuts into items (the detector's pauses,
// the model's window, commits), commits and clears.
#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "media/audio.h"
#include "server/api.h"
#include "server/realtime_session.h"

namespace mmrt::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

double ms_of(int64_t samples, int32_t rate) {
  return static_cast<double>(samples) * 1000.0 / rate;
}

// Little-endian PCM16 bytes as samples (an odd last byte is ignored).
std::vector<int16_t> pcm16_le(std::span<const uint8_t> b) {
  std::vector<int16_t> s(b.size() / 2);
  for (size_t i = 0; i < s.size(); ++i)
    s[i] = static_cast<int16_t>(static_cast<uint16_t>(b[2 * i] | (b[2 * i + 1] << 8)));
  return s;
}

// The samples of an item's WAV (encode_wav_pcm16's 44-byte header, then PCM16).
std::vector<int16_t> wav_samples(const std::vector<uint8_t>& wav) {
  constexpr size_t kHeader = 44;
  return pcm16_le(std::span(wav).subspan(std::min(kHeader, wav.size())));
}

}  // namespace

void RealtimeSession::append(const json& ev, const std::string& eid, int64_t now_ns) {
  auto a = ev.find("audio");
  if (a == ev.end() || !a->is_string())
    return error("invalid_request_error", "invalid_value",
                 "input_audio_buffer.append needs a base64 string 'audio'", "audio", eid);
  std::vector<uint8_t> bytes;
  try {
    bytes = decode_base64(a->get_ref<const std::string&>(),
                          static_cast<uint64_t>(opt_.max_event_bytes), "audio");
  } catch (const ApiError& e) {
    return error("invalid_request_error", "invalid_base64", e.what(), "audio", eid);
  }
  if (bytes.size() % 2 != 0)
    return error("invalid_request_error", "invalid_audio",
                 "the audio has an odd number of bytes (" + std::to_string(bytes.size()) +
                     "): pcm16 is 2 bytes per sample",
                 "audio", eid);
  const int64_t n = static_cast<int64_t>(bytes.size() / 2);
  const int64_t limit = static_cast<int64_t>(opt_.max_buffer_seconds * rate_);
  if (buffered_samples() + n > limit) {
    char msg[200];
    std::snprintf(msg, sizeof msg,
                  "the audio buffer would hold %.1f s, over the session's limit of %.0f s: "
                  "the buffer was cleared",
                  static_cast<double>(buffered_samples() + n) / rate_, opt_.max_buffer_seconds);
    clear_buffer();
    items_.clear();
    committed_ = 0;
    return error("invalid_request_error", "input_audio_buffer_too_long", msg, "audio", eid);
  }
  if (opt_.budget) {
    // The server's budget, across sessions: charged before the samples are taken.
    const int64_t to_ms = (buffered_samples() + n) * 1000 / rate_;
    if (!opt_.budget->move(charged_ms_, to_ms)) {
      char msg[240];
      std::snprintf(msg, sizeof msg,
                    "the server holds %.0f s of Realtime audio across its sessions, its limit "
                    "(--realtime-max-total-audio): this append (%.1f s) was dropped, the buffer "
                    "kept; commit or clear it, or retry later",
                    static_cast<double>(opt_.budget->held_ms()) / 1000,
                    static_cast<double>(n) / rate_);
      return error("server_error", "server_audio_budget_exceeded", msg, "audio", eid);
    }
    charged_ms_ = to_ms;
  }
  push_samples(pcm16_le(bytes), now_ns);
}

void RealtimeSession::push_samples(std::span<const int16_t> s, int64_t now_ns) {
  std::vector<float> f(s.size());
  for (size_t i = 0; i < s.size(); ++i) f[i] = static_cast<float>(s[i]) / 32768.0f;
  open_.insert(open_.end(), s.begin(), s.end());
  stream_pos_ += static_cast<int64_t>(s.size());
  const int64_t max_item = int64_t{opt_.max_item_ms} * rate_ / 1000;
  for (const media::VadEvent& e : vad_.push(f)) {
    if (e.kind == media::VadEventKind::kSpeechStarted) {
      in_speech_ = true;
      last_stop_ = -1;
      speech_item_ = next_id("item");
      if (vad_on_)
        emit({{"type", "input_audio_buffer.speech_started"},
              {"audio_start_ms", static_cast<int64_t>(ms_of(e.offset, rate_))},
              {"item_id", speech_item_}});
    } else {
      in_speech_ = false;
      cut(e.offset);
      last_stop_ = e.offset;
      if (vad_on_)
        emit({{"type", "input_audio_buffer.speech_stopped"},
              {"audio_end_ms", static_cast<int64_t>(ms_of(e.offset, rate_))},
              {"item_id", speech_item_}});
    }
  }
  while (stream_pos_ - open_begin_ >= max_item) cut(open_begin_ + max_item);
  if (vad_on_ && last_stop_ >= 0 && !in_speech_ &&
      stream_pos_ - last_stop_ >= int64_t{silence_ms_} * rate_ / 1000) {
    last_stop_ = -1;
    if (commit("", now_ns)) {
      if (response_ == 0)
        create_response("", now_ns);
      else
        maybe_prefill();  // the response waits for the one in progress
    }
  }
}

void RealtimeSession::cut(int64_t at, bool prefill) {
  if (at <= open_begin_ || at > stream_pos_) return;
  // A pause right after a commit would cut a sliver no audio token can come from: it stays open
  // and begins the next item instead.
  if (prefill && at - open_begin_ < min_item_samples()) return;
  const size_t n = static_cast<size_t>(at - open_begin_);
  RealtimeItem it{.id = next_id("item"),
                  .begin = open_begin_,
                  .end = at,
                  .wav = media::encode_wav_pcm16(std::span(open_).first(n), rate_)};
  items_.push_back(std::move(it));
  open_.erase(open_.begin(), open_.begin() + static_cast<std::ptrdiff_t>(n));
  open_begin_ = at;
  if (prefill) maybe_prefill();
}

int64_t RealtimeSession::min_item_samples() const {
  return std::max<int64_t>(1, int64_t{opt_.min_item_ms} * rate_ / 1000);
}

void RealtimeSession::absorb_short_tail() {
  RealtimeItem& last = items_.back();
  std::vector<int16_t> s = wav_samples(last.wav);
  s.insert(s.end(), open_.begin(), open_.end());
  const int64_t max_item = int64_t{opt_.max_item_ms} * rate_ / 1000;
  size_t keep = s.size();
  // An item at the window's length gives the tail what it lacks instead (a whole window is far
  // longer than two minimal items).
  if (static_cast<int64_t>(s.size()) > max_item)
    keep = s.size() - static_cast<size_t>(min_item_samples());
  last.end = last.begin + static_cast<int64_t>(keep);
  last.wav = media::encode_wav_pcm16(std::span(s).first(keep), rate_);
  open_.assign(s.begin() + static_cast<std::ptrdiff_t>(keep), s.end());
  open_begin_ = last.end;
  // A prefill of the item's old audio no longer matches it: the response prefills it again.
  prefill_items_ = std::min(prefill_items_, items_.size() - 1);
}

bool RealtimeSession::commit(const std::string& eid, int64_t now_ns) {
  if (open_.empty() && items_.size() == committed_) {
    error("invalid_request_error", "input_audio_buffer_commit_empty",
          "the input audio buffer is empty: nothing to commit", "", eid);
    return false;
  }
  // An item shorter than min_item_ms gives no audio token (the model's encoder refuses it, and
  // the whole response failed with it): a short tail joins the item before it, and a short
  // buffer is not committed (OpenAI's rule: at least 100 ms).
  const int64_t tail = stream_pos_ - open_begin_;
  if (tail > 0 && tail < min_item_samples()) {
    if (items_.size() == committed_) {
      char msg[200];
      std::snprintf(msg, sizeof msg,
                    "the input audio buffer holds %.1f ms of audio, under the %d ms an item "
                    "needs: append more before committing (the buffer is kept)",
                    ms_of(tail, rate_), opt_.min_item_ms);
      error("invalid_request_error", "input_audio_buffer_commit_empty", msg, "", eid);
      return false;
    }
    absorb_short_tail();
  }
  cut(stream_pos_, /*prefill=*/false);
  const std::string previous = committed_ > 0 ? items_[committed_ - 1].id : std::string();
  committed_ = items_.size();
  (void)now_ns;
  emit({{"type", "input_audio_buffer.committed"},
        {"previous_item_id", previous.empty() ? ojson(nullptr) : ojson(previous)},
        {"item_id", items_.back().id}});
  return true;
}

void RealtimeSession::clear_buffer() {
  items_.resize(committed_);
  prefill_items_ = std::min(prefill_items_, items_.size());
  open_.clear();
  open_.shrink_to_fit();
  open_begin_ = stream_pos_;
  last_stop_ = -1;
}

}  // namespace mmrt::server
