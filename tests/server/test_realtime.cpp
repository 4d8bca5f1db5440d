// The Realtime session's state machine alone (no socket, no engine): event parsing and every
// error case by its code, cut points against the VAD run over the whole stream, the item WAVs
// (16 kHz round trip exact; 24 kHz decoding to the libsoxr resampling of the item, 640 samples
// per 40 ms), segmented prefill (at most one in flight, the newest next), server_vad's own
// commit, the bounded buffer, the idle timeout, and the chat template's prefix property.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "io/tokenizer.h"
#include "media/audio.h"
#include "models/qwen2_audio/chat_template.h"
#include "models/qwen2_audio/tiny_checkpoint.h"
#include "server/api.h"
#include "server/realtime_session.h"

namespace mmrt::server {
namespace {

using json = nlohmann::json;

struct FakeSink : RealtimeSink {
  std::vector<json> events;
  std::vector<std::pair<uint64_t, engine::GenerateRequest>> submits;
  std::vector<uint64_t> cancels;
  bool closed = false;
  void send(std::string ev) override { events.push_back(json::parse(ev)); }
  void submit(uint64_t t, engine::GenerateRequest r, RealtimeJob) override {
    submits.emplace_back(t, std::move(r));
  }
  void cancel(uint64_t t) override { cancels.push_back(t); }
  void close(uint16_t, std::string) override { closed = true; }
  std::vector<json> of(const std::string& type) const {
    std::vector<json> out;
    for (const auto& e : events)
      if (e["type"] == type) out.push_back(e);
    return out;
  }
};

std::string b64(const std::vector<uint8_t>& b) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < b.size(); i += 3) {
    uint32_t v =
        b[i] << 16 | (i + 1 < b.size() ? b[i + 1] << 8 : 0) | (i + 2 < b.size() ? b[i + 2] : 0);
    out += k[v >> 18 & 63];
    out += k[v >> 12 & 63];
    out += i + 1 < b.size() ? k[v >> 6 & 63] : '=';
    out += i + 2 < b.size() ? k[v & 63] : '=';
  }
  return out;
}

std::string append_event(std::span<const int16_t> s) {
  std::vector<uint8_t> b;
  for (int16_t v : s) {
    b.push_back(static_cast<uint8_t>(v & 0xff));
    b.push_back(static_cast<uint8_t>((v >> 8) & 0xff));
  }
  return json({{"type", "input_audio_buffer.append"}, {"audio", b64(b)}}).dump();
}

// Tone bursts (speech-band) separated by silences, with a little noise: [seconds] alternating
// silence, sound, silence, ...
std::vector<int16_t> bursts(int rate, std::vector<double> pattern) {
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0, 20);
  std::vector<int16_t> out;
  for (size_t k = 0; k < pattern.size(); ++k) {
    const int64_t n = static_cast<int64_t>(pattern[k] * rate);
    for (int64_t i = 0; i < n; ++i) {
      double v = noise(rng);
      if (k % 2 == 0)
        v += 8000 * std::sin(2 * M_PI * 300 * i / rate) * (1 + 0.3 * std::sin(i * 0.002));
      out.push_back(static_cast<int16_t>(std::lround(v)));
    }
  }
  return out;
}

int64_t ns(double s) {
  return static_cast<int64_t>(s * 1e9);
}

struct Fixture {
  FakeSink sink;
  RealtimeSession s;
  explicit Fixture(RealtimeOptions o = {}) : s(std::move(o), sink, "t", 0) { s.start(); }
  void ev(const json& j, double t = 0) { s.on_event(j.dump(), ns(t)); }
  std::string last_error_code() {
    auto e = sink.of("error");
    return e.empty() ? "" : e.back()["error"]["code"].get<std::string>();
  }
  void manual16k() {
    ev({{"type", "session.update"},
        {"session", {{"turn_detection", nullptr}, {"mmrt", {{"input_sample_rate", 16000}}}}}});
  }
  void push(const std::vector<int16_t>& s16, size_t seed = 1) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    for (size_t at = 0; at < s16.size();) {
      const size_t n = std::min(s16.size() - at, size_t{37} + rng() % 5000);
      s.on_event(append_event(std::span(s16).subspan(at, n)), 0);
      at += n;
    }
  }
};

TEST(Realtime, SessionCreatedThenEveryErrorNamedAndTheSessionGoesOn) {
  RealtimeOptions o;
  o.max_event_bytes = 1000;
  Fixture f(o);
  ASSERT_EQ(f.sink.events.size(), 1u);
  EXPECT_EQ(f.sink.events[0]["type"], "session.created");
  EXPECT_EQ(f.sink.events[0]["session"]["input_audio_format"], "pcm16");
  struct Case {
    std::string text, code, in_message;
  };
  const std::vector<Case> cases = {
      {"{nope", "invalid_json", "JSON"},
      {R"({"x":1})", "missing_type", "type"},
      {R"({"type":"conversation.item.create"})", "unsupported_event", "conversation.item.create"},
      {R"({"type":"input_audio_buffer.append","audio":"AQID"})", "invalid_audio", "odd number"},
      {R"({"type":"input_audio_buffer.append","audio":"**"})", "invalid_base64", "base64"},
      {R"({"type":"input_audio_buffer.append"})", "invalid_value", "audio"},
      {R"({"type":"input_audio_buffer.append","audio":")" + std::string(2000, 'A') + "\"}",
       "event_too_large", "1000 bytes"},
      {R"({"type":"session.update","session":{"input_audio_format":"g711_alaw"}})", "invalid_value",
       "g711_alaw"},
      {R"({"type":"session.update","session":{"mmrt":{"input_sample_rate":8000}}})",
       "invalid_value", "16000 or 24000"},
      {R"({"type":"session.update","session":{"turn_detection":{"type":"semantic_vad"}}})",
       "invalid_value", "semantic_vad"},
      {R"({"type":"session.update","session":{"temperature":3}})", "invalid_value", "temperature"},
      {R"({"type":"session.update","session":{"modalities":["text","audio"]}})", "invalid_value",
       "text only"},
      {R"({"type":"input_audio_buffer.commit","event_id":"ev9"})",
       "input_audio_buffer_commit_empty", "empty"},
      {R"({"type":"response.create"})", "input_audio_buffer_not_committed", "commit"},
      {R"({"type":"response.cancel"})", "response_cancel_not_active", "no response"},
  };
  for (const Case& c : cases) {
    const size_t before = f.sink.events.size();
    f.s.on_event(c.text, 0);
    ASSERT_EQ(f.sink.events.size(), before + 1) << c.text;
    const json& e = f.sink.events.back();
    EXPECT_EQ(e["type"], "error") << c.text;
    EXPECT_EQ(e["error"]["code"], c.code) << c.text;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(c.in_message), std::string::npos)
        << e.dump();
    EXPECT_TRUE(e["event_id"].is_string());
    if (c.code == "input_audio_buffer_commit_empty") {
      EXPECT_EQ(e["error"]["event_id"], "ev9");
    }
  }
  // A rejected update changed nothing; a good one applies.
  f.ev({{"type", "session.update"}, {"session", {{"temperature", 0}, {"instructions", "Hi"}}}});
  EXPECT_EQ(f.sink.events.back()["type"], "session.updated");
  EXPECT_EQ(f.sink.events.back()["session"]["temperature"], 0);
  EXPECT_EQ(f.sink.events.back()["session"]["mmrt"]["input_sample_rate"], 24000);
  EXPECT_TRUE(f.sink.submits.empty());
}

TEST(Realtime, ItemsAreContiguousAndCutAtTheVadStops) {
  Fixture f;
  f.manual16k();
  const auto audio = bursts(16000, {0.5, 0.8, 0.7, 1.1, 0.9, 0.6, 0.3});
  f.push(audio);
  // The cut points are the stops of the detector run over the whole stream (same config).
  media::VadConfig c;
  c.min_silence_ms = 400;
  c.prefix_padding_ms = 0;
  std::vector<float> fl(audio.size());
  for (size_t i = 0; i < audio.size(); ++i) fl[i] = audio[i] / 32768.0f;
  const auto segs = media::detect_segments(fl, c);
  ASSERT_GE(segs.size(), 2u);
  ASSERT_EQ(f.s.items().size(), 2u);  // the last segment's stop comes only at the end
  EXPECT_EQ(f.s.items()[0].end, segs[0].end);
  EXPECT_EQ(f.s.items()[1].end, segs[1].end);
  f.ev({{"type", "input_audio_buffer.commit"}});
  EXPECT_EQ(f.sink.of("input_audio_buffer.committed").size(), 1u);
  const auto& it = f.s.items();
  ASSERT_EQ(it.size(), 3u);
  EXPECT_EQ(it[0].begin, 0);
  for (size_t k = 0; k + 1 < it.size(); ++k) {
    EXPECT_EQ(it[k].end, it[k + 1].begin);
    EXPECT_EQ(it[k].end % 640, 0);
  }
  EXPECT_EQ(it.back().end, static_cast<int64_t>(audio.size()));
  // Each item's WAV decodes to exactly its samples.
  for (const auto& item : it) {
    const auto d = media::decode_audio(item.wav);
    ASSERT_EQ(static_cast<int64_t>(d.size()), item.end - item.begin);
    for (size_t i = 0; i < d.size(); i += 97)
      ASSERT_EQ(d[i], audio[static_cast<size_t>(item.begin) + i] / 32768.0f);
  }
  // Another chunking gives the same items.
  Fixture g;
  g.manual16k();
  g.push(audio, 99);
  g.ev({{"type", "input_audio_buffer.commit"}});
  ASSERT_EQ(g.s.items().size(), it.size());
  for (size_t k = 0; k < it.size(); ++k) EXPECT_EQ(g.s.items()[k].wav, it[k].wav);
}

// An item under ~20 ms gives the audio encoder no token, and a response with one failed ("the
// audio is 96 samples long, too short for one audio token"): no item is under 100 ms.
constexpr int64_t kMinItem16k = 1600;

void expect_items_whole(const Fixture& f, int64_t total) {
  const auto& it = f.s.items();
  ASSERT_FALSE(it.empty());
  EXPECT_EQ(it.back().end, total);
  for (size_t k = 0; k < it.size(); ++k) {
    EXPECT_GE(it[k].end - it[k].begin, kMinItem16k) << "item " << k;
    if (k > 0) {
      EXPECT_EQ(it[k].begin, it[k - 1].end);
    }
    EXPECT_EQ(static_cast<int64_t>(media::decode_audio(it[k].wav).size()), it[k].end - it[k].begin);
  }
}

TEST(Realtime, ABufferUnder100msIsNotCommittedAndKept) {
  Fixture a;
  a.manual16k();
  const auto tone = bursts(16000, {0.2});
  a.push(std::vector<int16_t>(tone.begin(), tone.begin() + 800));
  a.ev({{"type", "input_audio_buffer.commit"}});
  ASSERT_EQ(a.last_error_code(), "input_audio_buffer_commit_empty");
  EXPECT_NE(a.sink.of("error").back()["error"]["message"].get<std::string>().find("100 ms"),
            std::string::npos);
  EXPECT_EQ(a.s.buffered_samples(), 800);
  a.push(std::vector<int16_t>(tone.begin() + 800, tone.begin() + 1760));
  a.ev({{"type", "input_audio_buffer.commit"}});
  EXPECT_EQ(a.sink.of("input_audio_buffer.committed").size(), 1u);
  expect_items_whole(a, 1760);
}

TEST(Realtime, APauseJustAfterAWindowCutCutsNoSliver) {
  // The speech stops 50 ms after the item cut at the window's length: the detector's stop (on
  // its 40 ms grid) cut an 80 ms item.
  RealtimeOptions o;
  o.max_item_ms = 1000;
  Fixture b(o);
  b.manual16k();
  const auto speech = bursts(16000, {0.0, 1.0, 1.05, 0.9, 0.6, 0.5});
  b.push(speech);
  b.ev({{"type", "input_audio_buffer.commit"}});
  EXPECT_EQ(b.sink.of("input_audio_buffer.committed").size(), 1u);
  expect_items_whole(b, static_cast<int64_t>(speech.size()));
}

TEST(Realtime, AShortTailAfterAWindowLongItemMovesTheBoundaryBack) {
  RealtimeOptions o;
  o.max_item_ms = 1000;
  Fixture c(o);
  c.manual16k();
  const auto tone = bursts(16000, {1.05});
  c.push(tone);
  ASSERT_EQ(c.s.items().size(), 1u);
  c.ev({{"type", "input_audio_buffer.commit"}});
  ASSERT_EQ(c.s.items().size(), 2u);
  EXPECT_EQ(c.s.items()[0].end, 16800 - kMinItem16k);
  expect_items_whole(c, 16800);
  const auto d = media::decode_audio(c.s.items()[1].wav);
  for (size_t i = 0; i < d.size(); i += 31)
    ASSERT_EQ(d[i], tone[16800 - kMinItem16k + i] / 32768.0f);
}

TEST(Realtime, SegmentedPrefillKeepsOneInFlightAndTheResponseHasAllItems) {
  Fixture f;
  f.manual16k();
  f.ev({{"type", "session.update"}, {"session", {{"instructions", "Be brief."}}}});
  f.push(bursts(16000, {0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.5}));
  ASSERT_EQ(f.s.items().size(), 3u);
  // The first cut submitted a prefill of item 1; the later cuts waited for it.
  ASSERT_EQ(f.sink.submits.size(), 1u);
  EXPECT_EQ(f.sink.submits[0].second.sampling.max_tokens, 1);
  EXPECT_EQ(f.sink.submits[0].second.media.size(), 1u);
  engine::RequestResult r;
  r.outcome = engine::Outcome::kFinished;
  f.s.on_done(f.sink.submits[0].first, r, 0);
  ASSERT_EQ(f.sink.submits.size(), 2u);  // the newest: all three items
  EXPECT_EQ(f.sink.submits[1].second.media.size(), 3u);
  f.ev({{"type", "input_audio_buffer.commit"}});
  f.ev({{"type", "response.create"}});
  ASSERT_EQ(f.sink.submits.size(), 3u);
  const auto& [ticket, g] = f.sink.submits[2];
  EXPECT_EQ(g.media.size(), 4u);
  EXPECT_EQ(g.messages.size(), 2u);
  EXPECT_EQ(g.messages[0].role, "system");
  EXPECT_EQ(g.messages[1].content.size(), 4u);
  for (size_t k = 0; k < 3; ++k)
    EXPECT_EQ(g.media[k].bytes, f.sink.submits[1].second.media[k].bytes);
  f.s.on_text(ticket, "Hel");
  f.s.on_text(ticket, "lo");
  r.tokens = {1, 2};
  r.prompt_tokens = 50;
  r.cached_prompt_tokens = 40;
  r.outcome = engine::Outcome::kStopped;
  f.s.on_done(ticket, r, 0);
  EXPECT_EQ(f.sink.of("response.text.delta").size(), 2u);
  EXPECT_EQ(f.sink.of("response.text.done")[0]["text"], "Hello");
  const json done = f.sink.of("response.done")[0]["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["usage"]["input_token_details"]["cached_tokens"], 40);
  EXPECT_EQ(done["mmrt"]["items"].size(), 4u);
  EXPECT_EQ(f.s.items().size(), 0u);  // answered: out of the conversation
  // A disconnect cancels what runs and frees the audio.
  f.push(bursts(16000, {0.6, 0.6, 0.6}));
  f.s.close();
  EXPECT_EQ(f.s.buffered_samples(), 0);
  EXPECT_FALSE(f.sink.cancels.empty());
}

TEST(Realtime, AFailedResponseNamesItsErrorWithANullOrNamedCode) {
  Fixture f;
  f.manual16k();
  f.push(bursts(16000, {0.3}));
  for (const auto& [code, want] : std::vector<std::pair<ErrorCode, json>>{
           {ErrorCode::kInvalidArgument, nullptr}, {ErrorCode::kFormat, "unprocessable_media"}}) {
    f.push(bursts(16000, {0.3}));
    f.ev({{"type", "input_audio_buffer.commit"}});
    f.ev({{"type", "response.create"}});
    engine::RequestResult r;
    r.outcome = engine::Outcome::kFailed;
    r.error = code;
    r.reason = "what went wrong";
    f.s.on_done(f.sink.submits.back().first, r, 0);
    const json done = f.sink.of("response.done").back()["response"];
    EXPECT_EQ(done["status"], "failed");
    const json& e = done["status_details"]["error"];
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_EQ(e["code"], want) << e.dump();  // as an error event's: null, not ""
    EXPECT_EQ(e["message"], "what went wrong");
  }
}

TEST(Realtime, ServerVadCommitsAndRespondsAfterTheSilence) {
  Fixture f;
  f.ev({{"type", "session.update"},
        {"session",
         {{"turn_detection",
           {{"type", "server_vad"}, {"silence_duration_ms", 500}, {"prefix_padding_ms", 0}}},
          {"mmrt", {{"input_sample_rate", 16000}}}}}});
  const auto audio = bursts(16000, {0.5, 0.8, 0.7, 1.1, 0.9, 0.6, 0.3});
  // Where the detector (same settings) stops the speech: the turn commits once 500 ms of audio
  // past that point have arrived, not before.
  std::vector<float> fl(audio.size());
  for (size_t i = 0; i < audio.size(); ++i) fl[i] = audio[i] / 32768.0f;
  media::VadConfig c;
  c.min_silence_ms = 400;
  c.prefix_padding_ms = 0;
  const auto segs = media::detect_segments(fl, c);
  ASSERT_GE(segs.size(), 2u);
  const size_t split = static_cast<size_t>(segs[0].end + 16000 * 45 / 100);
  ASSERT_LT(split + 1600, audio.size());
  f.push(std::vector<int16_t>(audio.begin(), audio.begin() + static_cast<std::ptrdiff_t>(split)));
  EXPECT_TRUE(f.sink.of("input_audio_buffer.committed").empty());  // 450 ms of silence only
  f.push(std::vector<int16_t>(audio.begin() + static_cast<std::ptrdiff_t>(split), audio.end()));
  ASSERT_GE(f.sink.of("input_audio_buffer.speech_started").size(), 1u);
  const auto stopped = f.sink.of("input_audio_buffer.speech_stopped");
  ASSERT_GE(stopped.size(), 1u);
  EXPECT_EQ(stopped[0]["audio_end_ms"].get<int64_t>(), segs[0].end / 16);
  EXPECT_EQ(stopped[0]["audio_end_ms"].get<int64_t>() % 40, 0);
  ASSERT_GE(f.sink.of("input_audio_buffer.committed").size(), 1u);
  ASSERT_EQ(f.sink.of("response.created").size(), 1u);
  // The response was submitted with the server default for "inf" output tokens.
  EXPECT_EQ(f.sink.submits.back().second.sampling.max_tokens, 256);
  EXPECT_TRUE(f.s.response_active());
}

TEST(Realtime, At24kHzItemsDecodeToTheResamplingOfTheirSamples) {
  Fixture f;
  f.ev({{"type", "session.update"}, {"session", {{"turn_detection", nullptr}}}});
  const auto audio = bursts(24000, {0.5, 0.7, 0.7, 0.5});
  f.push(audio);
  f.ev({{"type", "input_audio_buffer.commit"}});
  ASSERT_GE(f.s.items().size(), 2u);
  const RealtimeItem& it = f.s.items()[0];
  EXPECT_EQ(it.end % 960, 0);
  std::vector<float> x;
  for (int64_t i = it.begin; i < it.end; ++i) x.push_back(audio[static_cast<size_t>(i)] / 32768.0f);
  const auto want = media::resample_audio(x, 24000, 16000);
  const auto got = media::decode_audio(it.wav);  // the engine's path: 16 kHz
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(static_cast<int64_t>(got.size()), (it.end - it.begin) * 2 / 3);  // 640 per 40 ms
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-6f) << i;
}

TEST(Realtime, TheBufferIsBoundedAndIdleSessionsClose) {
  RealtimeOptions o;
  o.max_buffer_seconds = 1;
  o.idle_timeout_ms = 1000;
  Fixture f(o);
  f.manual16k();
  const auto half = bursts(16000, {0.5});
  f.s.on_event(append_event(half), 0);
  EXPECT_EQ(f.s.buffered_samples(), 8000);
  f.s.on_event(append_event(bursts(16000, {0.6})), 0);
  EXPECT_EQ(f.last_error_code(), "input_audio_buffer_too_long");
  EXPECT_EQ(f.s.buffered_samples(), 0);
  f.s.on_event(append_event(half), 0);  // the session goes on
  EXPECT_EQ(f.s.buffered_samples(), 8000);
  f.s.tick(ns(0.5));
  EXPECT_FALSE(f.sink.closed);
  f.s.tick(ns(1.5));
  EXPECT_TRUE(f.sink.closed);
  EXPECT_EQ(f.last_error_code(), "session_idle_timeout");
}

// One budget across sessions: a second session's append over it is refused (an error event, the
// append dropped, its buffer kept); audio given back (cleared, closed) makes room again.
TEST(Realtime, OneAudioBudgetAcrossSessions) {
  RealtimeOptions o;
  o.budget = std::make_shared<AudioBudget>(1500);  // 1.5 s
  Fixture a(o), b(o);
  a.manual16k();
  b.manual16k();
  const auto second = bursts(16000, {1.0});
  a.s.on_event(append_event(second), 0);
  EXPECT_EQ(o.budget->held_ms(), 1000);
  const auto half = bursts(16000, {0.5});
  b.s.on_event(append_event(half), 0);
  EXPECT_EQ(o.budget->held_ms(), 1500);
  b.s.on_event(append_event(half), 0);
  EXPECT_EQ(b.last_error_code(), "server_audio_budget_exceeded");
  EXPECT_EQ(b.s.buffered_samples(), 8000) << "the buffer is kept";
  EXPECT_EQ(o.budget->held_ms(), 1500);
  a.ev({{"type", "input_audio_buffer.clear"}});
  EXPECT_EQ(o.budget->held_ms(), 500);
  b.s.on_event(append_event(half), 0);
  EXPECT_EQ(b.s.buffered_samples(), 16000);
  EXPECT_EQ(o.budget->held_ms(), 1000);
  b.s.close();
  EXPECT_EQ(o.budget->held_ms(), 0);
}

// The idle clock does not run while the server answers (a response in progress).
TEST(Realtime, IdleTimeoutWaitsForTheResponse) {
  RealtimeOptions o;
  o.idle_timeout_ms = 1000;
  Fixture f(o);
  f.manual16k();
  f.s.on_event(append_event(bursts(16000, {0.5})), 0);
  f.ev({{"type", "input_audio_buffer.commit"}});
  f.ev({{"type", "response.create"}});
  ASSERT_TRUE(f.s.response_active());
  f.s.tick(ns(5));
  EXPECT_FALSE(f.sink.closed) << "closed in the middle of a response";
  f.s.tick(ns(5.5));
  EXPECT_FALSE(f.sink.closed);
}

TEST(Realtime, PcmWavHeader) {
  const std::vector<int16_t> s = {0, 1, -1, 32767, -32768};
  const auto w = media::encode_wav_pcm16(s, 24000);
  ASSERT_EQ(w.size(), 44u + 10u);
  EXPECT_EQ(std::string(w.begin(), w.begin() + 4), "RIFF");
  const media::AudioInfo info = media::probe_audio(w);
  EXPECT_EQ(info.sample_rate, 24000);
  EXPECT_EQ(info.channels, 1);
  EXPECT_EQ(info.frames, 5);
}

// A partial conversation (items 1..k) renders as a token prefix of the final one (items
// 1..n) up to item k's <|audio_eos|>\n: the prefill's KV blocks in that prefix are reused.
TEST(Realtime, PartialPromptIsATokenPrefixOfTheFinalOne) {
  const auto dir = std::filesystem::temp_directory_path() / "mmrt_test_realtime_tok";
  models::qwen2_audio::make_tiny_checkpoint(dir.string(), {});
  const io::Tokenizer tok = io::Tokenizer::from_file((dir / "tokenizer.json").string());
  for (const std::string instr : {"", "Answer briefly."}) {
    const auto fin =
        tok.encode(models::qwen2_audio::render_chat(realtime_messages(instr, 4), true));
    for (size_t k = 1; k < 4; ++k) {
      const std::string part = models::qwen2_audio::render_chat(realtime_messages(instr, k), true);
      const std::string upto = part.substr(0, part.rfind("<|audio_eos|>\n") + 14);
      const auto p = tok.encode(upto);
      ASSERT_LT(p.size(), fin.size());
      EXPECT_TRUE(std::equal(p.begin(), p.end(), fin.begin())) << k << " " << instr;
      const auto whole = tok.encode(part);
      EXPECT_TRUE(std::equal(p.begin(), p.end(), whole.begin()));
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mmrt::server
