// The engine with a tiny Qwen2-Audio checkpoint, reached only through the registry (the engine
// sees no family): audio requests batched, chunked and preempted give the tokens each gives
// alone; a repeated clip hits the encoder and prefix caches; long audio is split into windows
// or refused before any decoding; cancellation in the middle of an audio prefill frees the KV.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../models/audio_test_util.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "models/registry.h"
#include "models/tiny_registry.h"

namespace fs = std::filesystem;
using namespace mmrt;
using namespace mmrt::engine;

namespace {

class EngineAudio : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("mmrt_engine_audio_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    models::TinyModelOptions o;
    o.dtype = DType::kF32;
    o.seed = 5;
    models::make_tiny_model(models::family_named("qwen2-audio"), dir_.string(), o);
    // 0.9 s, 2.3 s and 4 s clips (22, 57 and 100 tokens: ((ceil(n / 160) - 1) // 2 + 1 - 2) // 2
    // + 1), and 70 s (windows of 30, 30 and 10 s: 750, 750 and 250 tokens).
    const std::pair<const char*, int64_t> clips[] = {
        {"a.wav", 14400}, {"b.wav", 36800}, {"c.wav", 64000}, {"long.wav", 70 * 16000}};
    uint32_t seed = 1;
    for (const auto& [name, n] : clips) test::write_wav(dir_ / name, n, seed++);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::vector<uint8_t> bytes(const std::string& name) {
    std::ifstream f(dir_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }

  static EngineConfig config(int32_t budget, int32_t kv_blocks, bool prefix = true) {
    return test::engine_config(dir_.string(), budget, kv_blocks, prefix);
  }

  static GenerateRequest audio_req(const std::vector<std::string>& clips, const std::string& text,
                                   int max_tokens) {
    GenerateRequest g;
    models::ChatMessage m;
    m.role = "user";
    for (const auto& c : clips) {
      m.content.push_back({models::ContentPart::Kind::kAudio, ""});
      g.media.push_back({models::Modality::kAudio, bytes(c), {}});
    }
    m.content.push_back({models::ContentPart::Kind::kText, text});
    g.messages.push_back(m);
    g.sampling.max_tokens = max_tokens;
    g.sampling.ignore_eos = true;
    return g;
  }
  static GenerateRequest text_req(const std::string& text, int max_tokens) {
    return test::text_request(text, max_tokens);
  }

  static fs::path dir_;
};
fs::path EngineAudio::dir_;

TEST_F(EngineAudio, BatchedChunkedPreemptedAndCachedMatchAlone) {
  std::vector<GenerateRequest> w;
  w.push_back(audio_req({"a.wav"}, "What was said?", 10));
  w.push_back(text_req("Tell me about the weather.", 12));
  w.push_back(audio_req({"b.wav", "c.wav"}, "Compare the two clips.", 8));
  w.push_back(audio_req({"c.wav"}, "What was said?", 14));
  // Small chunks (audio runs split across steps) and a KV cache too small for the batch.
  const test::AloneVsBatched run =
      test::expect_batched_match_alone(w, config(4096, 512, false), config(24, 20, true));
  const std::vector<int64_t>& prompt_tokens = run.prompt_tokens;
  // The placeholder runs: 22 and 100 audio tokens for the same text around them.
  EXPECT_EQ(prompt_tokens[3] - prompt_tokens[0], 100 - 22);
  EXPECT_GT(prompt_tokens[2], 57 + 100);
  const EngineStats& s = run.stats;
  EXPECT_GT(s.preemptions, 0) << "the KV cache was meant to be too small for the batch";
  EXPECT_GT(s.encoder_hits, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

TEST_F(EngineAudio, RepeatedClipHitsEncoderAndPrefixCaches) {
  auto eng = Engine::create(config(512, 256, true));
  RequestResult first = eng->submit(audio_req({"c.wav"}, "What is this?", 4)).wait();
  ASSERT_EQ(first.outcome, Outcome::kFinished) << first.reason;
  EXPECT_EQ(eng->stats().encoder_runs, 1);
  GenerateRequest g2 = audio_req({"c.wav"}, "What is this?", 4);
  g2.messages.push_back(models::ChatMessage::text("assistant", "A sound."));
  g2.messages.push_back(models::ChatMessage::text("user", "Which one?"));
  RequestResult second = eng->submit(g2).wait();
  EXPECT_EQ(eng->stats().encoder_runs, 1) << "the clip was encoded again";
  EXPECT_EQ(eng->stats().media_skipped, 1) << "a cached clip was decoded again";
  EXPECT_GE(second.cached_prompt_tokens, first.prompt_tokens - 16)
      << "the clip's KV was not reused";
  // Other text before the clip: no KV reuse past it, but the encoder output is reused.
  GenerateRequest g3 = audio_req({"c.wav"}, "Other question", 2);
  g3.messages.insert(g3.messages.begin(), models::ChatMessage::text("system", "Be brief."));
  ASSERT_EQ(eng->submit(g3).wait().outcome, Outcome::kFinished);
  EXPECT_EQ(eng->stats().encoder_runs, 1);
  EXPECT_GE(eng->stats().encoder_hits, 1);
  // Another tenant: encoded again, nothing shared.
  GenerateRequest g4 = audio_req({"c.wav"}, "What is this?", 2);
  g4.tenant = "other";
  RequestResult fourth = eng->submit(g4).wait();
  EXPECT_EQ(eng->stats().encoder_runs, 2);
  EXPECT_EQ(fourth.cached_prompt_tokens, 0);
}

TEST_F(EngineAudio, LongAudioIsSplitIntoWindowsOrRefused) {
  {
    auto eng = Engine::create(config(4096, 1024, false));
    RequestResult r = eng->submit(audio_req({"long.wav"}, "Summarise.", 2)).wait();
    ASSERT_EQ(r.outcome, Outcome::kFinished) << r.reason;
    RequestResult s = eng->submit(audio_req({"a.wav"}, "Summarise.", 2)).wait();
    ASSERT_EQ(s.outcome, Outcome::kFinished) << s.reason;
    // Two full windows of 750 tokens and a 10 s one of 250, against 22 for the short clip.
    EXPECT_EQ(r.prompt_tokens - s.prompt_tokens, 750 + 750 + 250 - 22);
  }
  EngineConfig c = config(4096, 1024, false);
  c.model.long_audio = models::LoadOptions::LongAudio::kRefuse;
  auto eng = Engine::create(c);
  RequestResult r = eng->submit(audio_req({"long.wav"}, "Summarise.", 2)).wait();
  // A media item that cannot be served fails the request, as a corrupt header does.
  EXPECT_EQ(r.outcome, Outcome::kFailed) << outcome_name(r.outcome);
  EXPECT_EQ(r.error, ErrorCode::kInvalidArgument) << r.reason;
  EXPECT_NE(r.reason.find("70"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("30"), std::string::npos) << r.reason;
  EXPECT_EQ(r.timeline.count(Event::kEncoderStart), 0) << "refused after encoding";
  EXPECT_EQ(eng->submit(audio_req({"a.wav"}, "ok", 2)).wait().outcome, Outcome::kFinished);
}

TEST_F(EngineAudio, CorruptClipFailsAloneAndCancelFreesItsKv) {
  auto eng = Engine::create(config(16, 512, true));
  GenerateRequest bad = audio_req({"a.wav"}, "x", 4);
  bad.media[0].bytes.resize(60);  // a header and a few samples of a longer data chunk
  RequestHandle hb = eng->submit(bad);
  RequestHandle hc = eng->submit(audio_req({"c.wav"}, "y", 400));
  RequestHandle ht = eng->submit(text_req("still served", 3));
  RequestResult rb = hb.wait();
  EXPECT_NE(rb.outcome, Outcome::kFinished);
  EXPECT_TRUE(rb.error == ErrorCode::kFormat || rb.error == ErrorCode::kInvalidArgument)
      << rb.reason;
  EXPECT_FALSE(rb.reason.empty());
  ASSERT_TRUE(hc.next().has_value());  // the clip's request is under way
  hc.cancel();
  EXPECT_EQ(hc.wait().outcome, Outcome::kCancelled);
  EXPECT_EQ(ht.wait().outcome, Outcome::kFinished);
  EXPECT_EQ(eng->stats().kv_blocks_used, 0);
}

}  // namespace
