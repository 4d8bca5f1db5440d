// The engine with the real tiny model: batched, chunked, preempted and cached generations are
// token-identical to each request run alone; repeated images hit the encoder and prefix caches;
// cancellation frees everything; bad inputs end as one clear outcome while others go on.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <tuple>

#include "../ops/isa_fixture.h"
#include "core/clock.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "models/qwen2_vl/tiny_checkpoint.h"
#include "models/registry.h"
#include "obs/report.h"

namespace fs = std::filesystem;
using namespace mmrt;
using namespace mmrt::engine;

namespace {

class EngineModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("mmrt_engine_model_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    models::qwen2_vl::TinyOptions o;
    o.dtype = DType::kF32;
    o.seed = 21;
    models::qwen2_vl::make_tiny_checkpoint(dir_.string(), o);
    // Two small real images (PPM would not do: the engine takes JPEG/PNG/WebP) from PIL.
    std::string cmd = std::string(MMRT_REF_PYTHON) +
                      " -c \"from PIL import Image; import numpy as np; "
                      "r=np.random.default_rng(0); "
                      "Image.fromarray(r.integers(0,255,(60,90,3),dtype=np.uint8)).save('" +
                      (dir_ / "a.png").string() +
                      "'); "
                      "Image.fromarray(r.integers(0,255,(84,56,3),dtype=np.uint8)).save('" +
                      (dir_ / "b.jpg").string() +
                      "', quality=90); "
                      "Image.new('RGB',(1,1),(9,9,9)).save('" +
                      (dir_ / "dot.png").string() +
                      "'); "
                      "Image.fromarray(r.integers(0,255,(1000,1000,3),dtype=np.uint8)).save('" +
                      (dir_ / "big.png").string() + "')\"";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::vector<uint8_t> bytes(const std::string& name) {
    std::ifstream f(dir_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }

  static EngineConfig config(int32_t budget, int32_t kv_blocks, bool prefix = true) {
    return test::engine_config(dir_.string(), budget, kv_blocks, prefix);
  }

  static GenerateRequest text_req(const std::string& text, int max_tokens) {
    return test::text_request(text, max_tokens);
  }
  static GenerateRequest image_req(const std::vector<std::string>& imgs, const std::string& text,
                                   int max_tokens) {
    GenerateRequest g;
    models::ChatMessage m;
    m.role = "user";
    for (const auto& i : imgs) {
      m.content.push_back({models::ContentPart::Kind::kImage, ""});
      g.add_image(bytes(i));
    }
    m.content.push_back({models::ContentPart::Kind::kText, text});
    g.messages.push_back(m);
    g.sampling.max_tokens = max_tokens;
    g.sampling.ignore_eos = true;
    return g;
  }

  static std::vector<GenerateRequest> workload() {
    std::vector<GenerateRequest> w;
    w.push_back(text_req("Tell me a story about a cat.", 12));
    w.push_back(image_req({"a.png"}, "What is in the image?", 10));
    w.push_back(text_req("hello", 16));
    w.push_back(image_req({"b.jpg", "a.png"}, "Compare them.", 8));
    w.push_back(text_req(std::string(300, 'x') + " long prompt", 6));
    w.push_back(image_req({"b.jpg"}, "Describe.", 14));
    return w;
  }

  static fs::path dir_;
};
fs::path EngineModel::dir_;

// Drains the stream until the engine answers with a replayed kDone; returns how many real kDone
// events it carried (each checked to carry `outcome`).
int count_real_dones(RequestHandle& h, Outcome outcome) {
  int real = 0;
  for (int guard = 0; guard < 100000; ++guard) {
    auto e = h.next(0);
    if (!e) {
      ADD_FAILURE() << "the stream of a finished request ran dry";
      return real;
    }
    if (e->kind != StreamEvent::Kind::kDone) continue;
    if (e->replay) return real;
    EXPECT_EQ(e->outcome, outcome);
    ++real;
  }
  ADD_FAILURE() << "no end to the stream";
  return real;
}

}  // namespace

TEST_F(EngineModel, BatchedChunkedPreemptedAndCachedMatchAlone) {
  auto w = workload();
  // Batched with small chunks and a tiny KV cache (forces preemption), with prefix caching.
  const EngineStats s =
      test::expect_batched_match_alone(w, config(4096, 512, false), config(24, 26, true)).stats;
  EXPECT_GT(s.preemptions, 0) << "the KV cache was meant to be too small for the batch";
  EXPECT_GT(s.prefix_hit_tokens, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

TEST_F(EngineModel, RepeatedImageHitsEncoderAndPrefixCaches) {
  auto eng = Engine::create(config(512, 256, true));
  RequestResult first = eng->submit(image_req({"a.png"}, "What is this?", 4)).wait();
  auto s1 = eng->stats();
  EXPECT_EQ(s1.encoder_runs, 1);
  // Second turn: same image, same context, more text after it.
  GenerateRequest g2 = image_req({"a.png"}, "What is this?", 4);
  g2.messages.push_back(models::ChatMessage::text("assistant", "A picture."));
  g2.messages.push_back(models::ChatMessage::text("user", "And the colours?"));
  RequestResult second = eng->submit(g2).wait();
  auto s2 = eng->stats();
  EXPECT_EQ(s2.encoder_runs, 1) << "the image was encoded again";
  EXPECT_EQ(s1.media_skipped, 0);
  EXPECT_EQ(s2.media_skipped, 1) << "a cached image was decoded again";
  EXPECT_EQ(second.timeline.count(Event::kMediaDecoded), 0);
  EXPECT_GE(second.cached_prompt_tokens, first.prompt_tokens - 16)
      << "the image's KV was not reused";
  // A different prompt text before the same image: no KV reuse past the text, but an encoder hit.
  GenerateRequest g3 = image_req({"a.png"}, "Other question", 2);
  g3.messages.insert(g3.messages.begin(),
                     models::ChatMessage::text("system", "Be brief and answer in French please."));
  eng->submit(g3).wait();
  auto s3 = eng->stats();
  EXPECT_EQ(s3.encoder_runs, 1);
  EXPECT_GE(s3.encoder_hits, 1);
  EXPECT_EQ(s3.media_skipped, 2) << "an encoder-cache hit was decoded again";
  // Another tenant: the same image is encoded again (caches are partitioned by tenant).
  GenerateRequest g4 = image_req({"a.png"}, "What is this?", 2);
  g4.tenant = "other";
  RequestResult fourth = eng->submit(g4).wait();
  EXPECT_EQ(eng->stats().encoder_runs, 2);
  EXPECT_EQ(eng->stats().media_skipped, 2) << "another tenant's cache entry served this one";
  EXPECT_EQ(fourth.cached_prompt_tokens, 0);
  // Skipping changes no token: the same four requests with every item decoded.
  EngineConfig all = config(512, 256, true);
  all.skip_cached_media = false;
  auto plain = Engine::create(all);
  EXPECT_EQ(plain->submit(image_req({"a.png"}, "What is this?", 4)).wait().tokens, first.tokens);
  EXPECT_EQ(plain->submit(g2).wait().tokens, second.tokens);
  EXPECT_EQ(plain->submit(g3).wait().tokens, eng->submit(g3).wait().tokens);
  EXPECT_EQ(plain->stats().media_skipped, 0);
}

// A large image arrives while a stream with a (very tight) TPOT target decodes: the steps' time
// goal leaves no room for its whole encoder, so it runs a part (a block) a step beside the
// stream's tokens. Both requests have the tokens they have with the image encoded whole.
TEST_F(EngineModel, AnImageEncodedInPartsBesideAStreamHasTheTokensOfAWholeEncode) {
  auto run = [&](bool parts) {
    EngineConfig c = config(512, 512, true);
    c.policy = "slo";
    c.encoder_parts = parts;
    c.sla = SlaConfig::from_json(
        R"({"classes":[{"name":"stream","ttft_ms":60000,"tpot_ms":1,"on_miss":"accept"}]})",
        "test");
    auto eng = Engine::create(c);
    GenerateRequest s = text_req("Tell me a story about a cat.", 3000);
    s.sla_class = "stream";
    RequestHandle hs = eng->submit(s);
    // Its first token: it decodes, on its TPOT schedule, when the image comes.
    for (auto e = hs.next(); e && e->kind != StreamEvent::Kind::kDone; e = hs.next())
      if (!e->token_ids.empty() || e->kind == StreamEvent::Kind::kText) break;
    GenerateRequest g = image_req({"big.png"}, "Describe.", 4);
    g.sla_class = "stream";
    const RequestResult ri = eng->submit(g).wait();
    const RequestResult rs = hs.wait();
    EXPECT_EQ(ri.outcome, Outcome::kFinished) << ri.reason;
    EXPECT_EQ(rs.outcome, Outcome::kFinished) << rs.reason;
    // The premise: the image's encoder began while the stream still decoded (the stream's
    // 3,000 tokens take ~0.4 s here; a loaded machine may decode the image later than that).
    const bool beside =
        ri.timeline.first(Event::kEncoderStart) < rs.timeline.first(Event::kFinished);
    return std::make_tuple(ri.tokens, rs.tokens, eng->stats().encoder_split_steps, beside);
  };
  const auto [whole_image, whole_stream, none, whole_beside] = run(false);
  EXPECT_EQ(none, 0);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto [image, stream, split, beside] = run(true);
    EXPECT_EQ(image, whole_image);
    EXPECT_EQ(stream, whole_stream);
    if (!beside) continue;  // the stream had ended: nothing to encode beside
    EXPECT_GT(split, 0) << "the image's encoder ran whole in one step beside the stream";
    return;
  }
  ADD_FAILURE() << "in 3 attempts the image never reached its encoder before the stream ended";
}

// A request admitted without decoding its image (an encoder-cache hit) whose cache entry is
// evicted before its prefill reaches the image: it goes back to the media stage, is decoded
// after all, and ends with the tokens it has alone.
TEST_F(EngineModel, SkippedImageEvictedBeforeItsPrefillIsDecodedAfterAll) {
  GenerateRequest b = image_req({"a.png"}, "What is this?", 6);
  std::vector<int32_t> alone;
  int64_t row_bytes = 0;
  {
    auto eng = Engine::create(config(512, 256, false));
    RequestResult r = eng->submit(b).wait();
    ASSERT_EQ(r.outcome, Outcome::kFinished) << r.reason;
    alone = r.tokens;
    row_bytes = eng->model_spec().embed_dim * 2;
  }
  // Both images merge to 6 tokens; the encoder cache holds one of them. One request runs at a
  // time, first come first served: the long text request D holds the engine while C (the other
  // image) and B (a.png, cached when admitted) wait; once C is decoded, D is cancelled, C runs
  // and its encoder evicts a.png.
  EngineConfig c = config(512, 256, false);
  c.encoder_cache_bytes = static_cast<uint64_t>(row_bytes) * 9;
  c.scheduler.max_running = 1;
  auto eng = Engine::create(c);
  ASSERT_EQ(eng->submit(b).wait().outcome, Outcome::kFinished);  // a.png now cached
  RequestHandle d = eng->submit(text_req("Tell me a long story about a cat.", 3000));
  RequestHandle hc = eng->submit(image_req({"b.jpg"}, "Describe.", 4));
  RequestHandle hb = eng->submit(b);
  for (int i = 0; i < 10000; ++i) {
    const EngineStats s = eng->stats();
    if (s.waiting == 2 && s.in_media == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(eng->stats().in_media, 0u);
  d.cancel();
  ASSERT_EQ(d.wait().outcome, Outcome::kCancelled) << "D ended before C was decoded";
  ASSERT_EQ(hc.wait().outcome, Outcome::kFinished);
  RequestResult rb = hb.wait();
  ASSERT_EQ(rb.outcome, Outcome::kFinished) << rb.reason;
  EXPECT_EQ(rb.tokens, alone);
  EXPECT_EQ(rb.timeline.count(Event::kMediaDecoded), 1);
  const EngineStats s = eng->stats();
  EXPECT_EQ(s.media_skipped, 1);
  EXPECT_EQ(s.media_redecoded, 1);
  EXPECT_EQ(s.encoder_runs, 3) << "a.png, b.jpg, a.png again";
  EXPECT_EQ(s.kv_blocks_used, 0);
}

TEST_F(EngineModel, CancellationFreesEverythingAndEachRequestEndsOnce) {
  auto eng = Engine::create(config(16, 256, true));
  std::vector<RequestHandle> hs;
  for (int i = 0; i < 6; ++i)
    hs.push_back(eng->submit(i % 2 ? image_req({"b.jpg"}, "x", 200)
                                   : text_req("story " + std::to_string(i), 200)));
  // Cancel at different moments: before start, during prefill/media, during decode.
  hs[0].cancel();
  hs[1].cancel();
  auto ev = hs[2].next();  // first text of request 2
  ASSERT_TRUE(ev.has_value());
  hs[2].cancel();
  for (auto& h : hs) {
    if (h.id() > 3) h.cancel();
  }
  int cancelled = 0;
  for (auto& h : hs) {
    RequestResult r = h.wait();
    EXPECT_TRUE(r.outcome == Outcome::kCancelled || r.outcome == Outcome::kFinished)
        << outcome_name(r.outcome);
    cancelled += r.outcome == Outcome::kCancelled;
    EXPECT_EQ(r.timeline.count(Event::kFinished), 1);
    // The stream ends with exactly one real kDone carrying the outcome; after it, next() keeps
    // answering kDone marked as a replay. Reading on past the first kDone would count a second
    // real one (the old loop stopped at the first and could not).
    EXPECT_EQ(count_real_dones(h, r.outcome), 1);
  }
  EXPECT_GE(cancelled, 4);
  eng->wait_idle();
  EXPECT_EQ(eng->stats().kv_blocks_used, 0);
}

TEST_F(EngineModel, BadInputsFailClearlyAndOthersGoOn) {
  auto eng = Engine::create(config(64, 128, true));
  RequestHandle good = eng->submit(text_req("keep going", 20));
  GenerateRequest corrupt = image_req({"a.png"}, "x", 4);
  corrupt.media[0].bytes.resize(corrupt.media[0].bytes.size() / 3);  // truncated PNG
  RequestHandle bad1 = eng->submit(corrupt);
  GenerateRequest garbage = image_req({"a.png"}, "x", 4);
  garbage.media[0].bytes = {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'};
  RequestHandle bad2 = eng->submit(garbage);
  GenerateRequest mismatch = image_req({"a.png"}, "x", 4);
  mismatch.add_image(bytes("b.jpg"));  // two images, one image part
  RequestHandle bad3 = eng->submit(mismatch);
  GenerateRequest huge = text_req("x", 1 << 20);  // cannot fit the KV cache
  RequestHandle bad4 = eng->submit(huge);
  GenerateRequest bad_sampling = text_req("x", 4);
  bad_sampling.sampling.top_p = 2.0f;
  RequestHandle bad5 = eng->submit(bad_sampling);

  RequestResult r1 = bad1.wait(), r2 = bad2.wait(), r3 = bad3.wait(), r4 = bad4.wait(),
                r5 = bad5.wait();
  EXPECT_EQ(r1.outcome, Outcome::kFailed);
  EXPECT_NE(r1.reason.find("PNG"), std::string::npos) << r1.reason;
  EXPECT_EQ(r2.outcome, Outcome::kFailed);
  EXPECT_NE(r2.reason.find("format"), std::string::npos) << r2.reason;
  EXPECT_EQ(r3.outcome, Outcome::kRefused);
  EXPECT_NE(r3.reason.find("image"), std::string::npos) << r3.reason;
  EXPECT_EQ(r4.outcome, Outcome::kRefused);
  EXPECT_NE(r4.reason.find("KV cache"), std::string::npos) << r4.reason;
  EXPECT_EQ(r5.outcome, Outcome::kRefused);
  EXPECT_NE(r5.reason.find("top_p"), std::string::npos) << r5.reason;
  RequestResult g = good.wait();
  EXPECT_EQ(g.outcome, Outcome::kFinished);
  EXPECT_EQ(g.tokens.size(), 20u);
}

// A handle outliving its engine: cancel() does nothing (no dangling engine pointer; ASan would
// see a use after free), and the handle still reports how the request ended.
TEST_F(EngineModel, HandleOutlivesTheEngine) {
  std::vector<RequestHandle> hs;
  {
    auto eng = Engine::create(config(16, 256, true));
    hs.push_back(eng->submit(text_req("a long story", 2000)));
    hs.push_back(eng->submit(image_req({"a.png"}, "and this?", 2000)));
    ASSERT_TRUE(hs[0].next().has_value());  // running
  }
  for (auto& h : hs) {
    h.cancel();
    h.cancel();
    RequestResult r = h.wait();
    EXPECT_EQ(r.outcome, Outcome::kCancelled);
    EXPECT_EQ(r.reason, "engine shut down");
    EXPECT_TRUE(h.done());
    EXPECT_EQ(count_real_dones(h, Outcome::kCancelled), 1);
  }
}

// stats() from another thread while the step loop runs: every snapshot is self-consistent (the
// books are copied by the step loop under the engine's lock, never read half-written).
TEST_F(EngineModel, StatsSnapshotsAreConsistentUnderLoad) {
  auto eng = Engine::create(config(24, 64, true));
  std::atomic<bool> stop{false};
  std::atomic<int64_t> reads{0}, bad{0};
  std::thread reader([&] {
    int64_t last_steps = 0, last_finished = 0;
    while (!stop.load()) {
      const EngineStats s = eng->stats();
      if (s.steps < last_steps || s.finished < last_finished || s.finished > s.submitted ||
          s.kv_blocks_used < 0 || s.kv_blocks_used > s.kv_blocks_total ||
          s.prefix_hit_tokens > s.prefix_query_tokens || s.refused_late > s.refused ||
          s.refused_after_encode > s.refused_late)
        ++bad;
      last_steps = s.steps;
      last_finished = s.finished;
      ++reads;
    }
  });
  std::vector<RequestHandle> hs;
  for (int round = 0; round < 3; ++round)
    for (auto& g : workload()) hs.push_back(eng->submit(g));
  for (auto& h : hs) EXPECT_EQ(h.wait().outcome, Outcome::kFinished);
  // On a loaded machine the reader may not have run yet: it reads a few times before it stops.
  while (reads.load() <= 10) std::this_thread::yield();
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  const EngineStats s = eng->stats();
  EXPECT_EQ(s.finished, static_cast<int64_t>(hs.size()));
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.running + s.waiting, 0u);
}

// The checkpoint's context length: a prompt that does not fit is refused with both numbers;
// generation stops at the limit with finish reason "length" (kFinished).
TEST_F(EngineModel, ContextLengthIsEnforced) {
  const fs::path small = dir_.parent_path() / (dir_.filename().string() + "_ctx64");
  fs::remove_all(small);
  fs::copy(dir_, small);
  {
    std::ifstream f(small / "config.json");
    nlohmann::json j = nlohmann::json::parse(f);
    j["max_position_embeddings"] = 64;
    std::ofstream(small / "config.json") << j.dump(2);
  }
  struct Cleanup {
    fs::path p;
    ~Cleanup() { fs::remove_all(p); }
  } cleanup{small};
  EngineConfig c = config(512, 64, true);
  c.model_dir = small.string();
  auto eng = Engine::create(c);
  EXPECT_EQ(eng->model_spec().context_length, 64);
  RequestResult too_long = eng->submit(text_req(std::string(400, 'y'), 4)).wait();
  EXPECT_EQ(too_long.outcome, Outcome::kRefused);
  ASSERT_TRUE(too_long.error.has_value());
  EXPECT_EQ(*too_long.error, ErrorCode::kInvalidArgument);
  EXPECT_NE(too_long.reason.find("the model's context holds 64 tokens"), std::string::npos)
      << too_long.reason;
  RequestResult r = eng->submit(text_req("hello", 1000)).wait();
  EXPECT_EQ(r.outcome, Outcome::kFinished) << r.reason;
  EXPECT_EQ(r.prompt_tokens + static_cast<int64_t>(r.tokens.size()), 64);
}

// One tenant's traffic cannot get another's requests refused: after 64 requests with a 1x1 image
// (their decode is all fixed cost), a 1000x1000 image of another tenant on an idle server is
// admitted within a 10 s deadline and served (one learned rate per pixel priced it at 89 s).
TEST_F(EngineModel, TinyImagesCannotPoisonTheMediaPrice) {
  auto eng = Engine::create(config(512, 256, true));
  for (int i = 0; i < 64; ++i) {
    GenerateRequest g = image_req({"dot.png"}, "dot " + std::to_string(i), 1);
    g.tenant = "dots";
    ASSERT_EQ(eng->submit(g).wait().outcome, Outcome::kFinished);
  }
  GenerateRequest big = image_req({"big.png"}, "What is it?", 1);
  big.tenant = "other";
  big.ttft_deadline_ns = 10'000'000'000;
  const RequestResult r = eng->submit(big).wait();
  EXPECT_EQ(r.outcome, Outcome::kFinished) << r.reason;
  EXPECT_LT(r.predicted_ttft_ns, 10'000'000'000);
}

// The request's clock starts at its arrival stamp (a server's first byte), not at submit: TTFT
// and E2E count the time before submit, split into http_read and intake; a deadline that time
// has already spent is refused at admission, saying so; a stamp in the future is ignored.
TEST_F(EngineModel, ClockStartsAtArrival) {
  auto eng = Engine::create(config(512, 128, true));
  const int64_t ms = 1'000'000;
  GenerateRequest g = text_req("hello", 2);
  g.arrival_ns = now_ns() - 300 * ms;
  g.read_ns = g.arrival_ns + 200 * ms;
  RequestResult r = eng->submit(g).wait();
  ASSERT_EQ(r.outcome, Outcome::kFinished) << r.reason;
  EXPECT_EQ(r.timeline.origin(), g.arrival_ns);
  const obs::RequestTimes t = obs::request_times(r);
  EXPECT_GE(t.ttft, 0.3);
  EXPECT_GE(t.e2e, t.ttft);
  EXPECT_NEAR(t.http_read, 0.2, 1e-9);
  EXPECT_GE(t.intake, 0.1 - 1e-9);

  GenerateRequest late = text_req("hello", 2);
  late.arrival_ns = now_ns() - 300 * ms;
  late.ttft_deadline_ns = 250 * ms;  // spent before submit
  r = eng->submit(late).wait();
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_NE(r.reason.find("250 ms to first token were spent before admission"), std::string::npos)
      << r.reason;
  EXPECT_GE(r.retry_after_ns, 0) << "its own work fits the class: a retry may be admitted";

  GenerateRequest future = text_req("hello", 2);
  future.arrival_ns = now_ns() + 60'000 * ms;  // not a time that has come: submit time instead
  future.ttft_deadline_ns = 60'000 * ms;
  r = eng->submit(future).wait();
  EXPECT_EQ(r.outcome, Outcome::kFinished) << r.reason;
  EXPECT_LE(r.timeline.origin(), now_ns());
  EXPECT_EQ(r.timeline.origin(), r.timeline.first(Event::kReceived));
}

// Once the engine is idle, admission plans with the idle step budget again: the longest prompt a
// class takes (the quote's prompt_tokens_alone, admission's "cannot serve it in that class")
// returns to what it was before a request with a tight TPOT target paced the steps, instead of
// staying at the last paced step's budget until the next request runs.
TEST_F(EngineModel, AnIdleEngineQuotesTheIdleBudget) {
  EngineConfig c = config(512, 256, true);
  c.policy = "slo";
  c.sla = SlaConfig::from_json(
      R"({"classes":[{"name":"tight","ttft_ms":60000,"tpot_ms":0.05,"weight":2,"on_miss":"accept"},
                     {"name":"loose","ttft_ms":20,"weight":1,"on_miss":"refuse"}],
          "default_class":"loose"})",
      "test");
  auto eng = Engine::create(c);
  std::string words;
  for (int i = 0; i < 300; ++i) words += "word ";
  eng->submit(text_req(words, 2)).wait();  // best effort: prefill steps for the cost model
  const auto alone = [&] {
    for (const Quote::Class& k : eng->quote().classes)
      if (k.name == "loose") return k.prompt_tokens_alone;
    return int64_t{-1};
  };
  const int64_t before = alone();
  ASSERT_GT(before, 0);
  GenerateRequest t = text_req(words, 16);
  t.sla_class = "tight";  // its 0.05 ms per token paces every step at the budget's floor
  RequestResult r = eng->submit(t).wait();
  ASSERT_EQ(r.outcome, Outcome::kFinished) << r.reason;
  int64_t after = alone();
  for (int i = 0; i < 200 && after < before * 8 / 10; ++i) {  // the loop's idle pass, soon
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    after = alone();
  }
  EXPECT_GE(after, before * 8 / 10) << "before the paced request " << before;
}

// Admission decides on the headers: a request refused at arrival never had its image decoded
// or encoded, and the refusal carries the error code a server maps to 503.
TEST_F(EngineModel, RefusedBeforeAnyMediaWork) {
  auto eng = Engine::create(config(512, 128, true));
  GenerateRequest g = image_req({"a.png", "b.jpg"}, "Compare.", 4);
  g.ttft_deadline_ns = 1;  // cannot be met: its own work alone is over it
  RequestResult r = eng->submit(g).wait();
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  ASSERT_TRUE(r.error.has_value());
  EXPECT_EQ(*r.error, ErrorCode::kUnavailable);
  EXPECT_NE(r.reason.find("this server cannot serve it in that class"), std::string::npos)
      << r.reason;
  EXPECT_EQ(r.retry_after_ns, -1) << "no retry helps";
  EXPECT_EQ(r.timeline.count(Event::kMediaDecoded), 0) << "its images were decoded";
  EXPECT_EQ(r.timeline.count(Event::kEncoderStart), 0);
  EXPECT_EQ(eng->stats().encoder_runs, 0);
  EXPECT_EQ(eng->stats().refused, 1);
  EXPECT_EQ(eng->stats().refused_late, 0);
  // The same request with no promise is served (best effort).
  g.ttft_deadline_ns = 0;
  RequestResult ok = eng->submit(g).wait();
  EXPECT_EQ(ok.outcome, Outcome::kFinished) << ok.reason;
  EXPECT_EQ(ok.timeline.count(Event::kMediaDecoded), 1);
  EXPECT_FALSE(ok.error.has_value());
}

// Outcomes carry an error code chosen by what the caller should do next.
TEST_F(EngineModel, ErrorCodesPerOutcome) {
  auto eng = Engine::create(config(64, 16, true));
  GenerateRequest bad_sampling = text_req("x", 4);
  bad_sampling.sampling.temperature = -1;
  GenerateRequest corrupt = image_req({"a.png"}, "x", 4);
  corrupt.media[0].bytes = {'G', 'I', 'F', '8', '9', 'a', 0, 0, 0, 0};
  GenerateRequest audio = text_req("x", 4);
  audio.messages[0].content.push_back({models::ContentPart::Kind::kAudio, ""});
  audio.media.push_back({models::Modality::kAudio, {1, 2, 3}});
  GenerateRequest no_room = text_req("x", 100000);  // 16 blocks of 16 tokens
  const std::pair<GenerateRequest*, ErrorCode> cases[] = {
      {&bad_sampling, ErrorCode::kInvalidArgument},
      {&corrupt, ErrorCode::kUnimplemented},  // GIF: a format mmrt does not decode
      {&audio, ErrorCode::kUnimplemented},
      {&no_room, ErrorCode::kResourceExhausted}};
  for (const auto& [g, code] : cases) {
    RequestResult r = eng->submit(*g).wait();
    ASSERT_TRUE(r.error.has_value()) << r.reason;
    EXPECT_EQ(*r.error, code) << r.reason;
    EXPECT_NE(r.reason.find(std::string(error_code_name(code))), std::string::npos) << r.reason;
  }
}

// The push side of a handle: the notify hook fires as events arrive (an event loop drains them
// with try_next), at least once per event, and at once for events already waiting.
TEST_F(EngineModel, NotifyHookForEventLoops) {
  auto eng = Engine::create(config(512, 128, true));
  std::atomic<int> calls{0};
  RequestHandle h = eng->submit(text_req("notify me", 12));
  h.set_notify([&] { ++calls; });
  std::string text;
  int events = 0;
  for (;;) {
    auto e = h.try_next();
    if (!e) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    ++events;
    if (e->kind == StreamEvent::Kind::kDone) break;
    text += e->text;
  }
  EXPECT_EQ(text, h.wait().text);
  EXPECT_GE(calls.load(), 1);
  std::atomic<int> late{0};
  h.set_notify([&] { ++late; });  // the replayed kDone is always there: notified at once
  EXPECT_EQ(late.load(), 0) << "nothing is queued after the real kDone was taken";
  RequestHandle h2 = eng->submit(text_req("again", 3));
  h2.wait();
  h2.set_notify([&] { ++late; });
  EXPECT_EQ(late.load(), 1) << "events were waiting";
  (void)events;
}

// Load-time calibration: the encoder's cost per patch is measured on a synthetic image and
// prices media from the first request; it leaves no trace in what the model computes.
TEST_F(EngineModel, EncoderCostIsMeasuredAtLoad) {
  EngineConfig c = config(512, 128);
  c.calibrate_encoder = false;
  auto off = Engine::create(c);
  const EngineStats so = off->stats();
  EXPECT_EQ(so.encoder_calibration.units, 0);
  EXPECT_EQ(encoder_calibration_text(so.encoder_calibration), "");
  c.calibrate_encoder = true;
  auto on = Engine::create(c);
  const EngineStats s = on->stats();
  const EncoderCalibration& k = s.encoder_calibration;
  EXPECT_EQ(k.error, "");
  EXPECT_EQ(k.modality, models::Modality::kImage);
  EXPECT_EQ(k.units, 24 * 24) << "a 336 x 336 image: 24 x 24 patches of 14";
  EXPECT_GT(k.ns_per_unit, 0);
  EXPECT_NEAR(k.ns_per_unit, k.seconds * 1e9 / static_cast<double>(k.units), 1e-9 * k.ns_per_unit);
  EXPECT_NEAR(s.cost_coefficients_ns[3], k.ns_per_unit, 1e-9 * k.ns_per_unit);
  EXPECT_NE(encoder_calibration_text(k).find("encoder measured at load"), std::string::npos);
  EXPECT_NE(s.cost_coefficients_ns[3], so.cost_coefficients_ns[3]) << "the prior was replaced";
  const RequestResult a = off->submit(image_req({"a.png"}, "What is this?", 8)).wait();
  const RequestResult b = on->submit(image_req({"a.png"}, "What is this?", 8)).wait();
  ASSERT_EQ(a.outcome, Outcome::kFinished) << a.reason;
  EXPECT_EQ(b.tokens, a.tokens);
}

// An encoder priced too high (as a load-time measurement on a busy machine comes out) refuses
// an image as never servable in its class; the step loop then measures the encoder again once
// idle, the lower price replaces it, and the same image is served. Without the re-measurement
// the second request is refused too.
TEST_F(EngineModel, AnEncoderPricedTooHighIsMeasuredAgainWhenIdle) {
  for (const bool remeasure : {true, false}) {
    EngineConfig c = config(512, 128);
    c.encoder_ns_per_unit = 1e9;  // 1 s per patch
    c.encoder_remeasure_ns = remeasure ? 1 : 0;
    auto eng = Engine::create(c);
    EXPECT_EQ(eng->stats().encoder_calibration.units, 0) << "the given price, not measured";
    GenerateRequest g = image_req({"a.png"}, "What is this?", 4);
    g.ttft_deadline_ns = 2'000'000'000;  // 2 s: the image's patches at 1 s each are over it
    const RequestResult a = eng->submit(g).wait();
    ASSERT_EQ(a.outcome, Outcome::kRefused) << a.reason;
    EXPECT_NE(a.reason.find("cannot serve it in that class"), std::string::npos) << a.reason;
    for (int i = 0; i < 600 && remeasure && eng->stats().encoder_remeasured == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const EngineStats s = eng->stats();
    EXPECT_EQ(s.encoder_remeasured, remeasure ? 1 : 0);
    const RequestResult b = eng->submit(g).wait();
    if (remeasure) {
      EXPECT_GT(s.encoder_calibration.units, 0);
      EXPECT_NEAR(s.cost_coefficients_ns[3], s.encoder_calibration.ns_per_unit,
                  1e-9 * s.encoder_calibration.ns_per_unit);
      EXPECT_LT(s.cost_coefficients_ns[3], 1e8) << "the measured price replaced the given one";
      EXPECT_EQ(b.outcome, Outcome::kFinished) << b.reason;
    } else {
      EXPECT_EQ(b.outcome, Outcome::kRefused) << "nothing corrected the price";
    }
  }
}

// take_events(): everything waiting, in order, at once; the texts add up to the result's text,
// exactly one kDone ends them, and nothing follows it (no replay, unlike next()).
TEST_F(EngineModel, TakeEventsHandsOverEverythingWaiting) {
  auto eng = Engine::create(config(512, 128, true));
  // While it runs: taken batch by batch as an event loop would.
  RequestHandle h = eng->submit(text_req("take them all", 24));
  std::string live;
  int dones = 0;
  for (int guard = 0; guard < 100000 && dones == 0; ++guard) {
    for (const StreamEvent& e : h.take_events()) {
      ASSERT_EQ(dones, 0) << "an event after the kDone";
      if (e.kind == StreamEvent::Kind::kDone)
        ++dones;
      else
        live += e.text;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const RequestResult r = h.wait();
  EXPECT_EQ(dones, 1);
  EXPECT_EQ(live, r.text);
  // After it ended: every event at once.
  RequestHandle h2 = eng->submit(text_req("take them all", 24));
  h2.wait();  // every event of h2 is waiting now
  const auto all = h2.take_events();
  ASSERT_GE(all.size(), 2u) << "text events, then the kDone";
  std::string text;
  for (size_t i = 0; i + 1 < all.size(); ++i) {
    EXPECT_EQ(all[i].kind, StreamEvent::Kind::kText) << i;
    text += all[i].text;
  }
  EXPECT_EQ(all.back().kind, StreamEvent::Kind::kDone);
  EXPECT_FALSE(all.back().replay);
  EXPECT_EQ(all.back().outcome, h2.wait().outcome);
  EXPECT_EQ(text, h2.wait().text);
  EXPECT_EQ(text, r.text) << "same greedy prompt, same text";
  EXPECT_TRUE(h2.take_events().empty()) << "nothing after the real kDone";
}

// The engine on every backend of this build (tests/ops/isa_fixture.h's device list): the same
// mixed workload, batched with chunks, preemption and both caches, gives on each device the tokens
// each request gives alone (on the same CPU variant; a device against the CPU's best). The
// emulated device runs the engine's whole seam as on a GPU (executor, KV cache, encoder store,
// sampling on the device) with the CPU's kernels. A device this build or machine lacks, or one
// without the model's kernels (the engine refuses it at load, naming them), reports the test
// skipped.
class EngineDevice : public EngineModel, public ::testing::WithParamInterface<const char*> {};

TEST_P(EngineDevice, BatchedOnTheDeviceMatchesTheCpuAlone) {
  const test::BackendParam b = test::parse_backend_param(GetParam());
  if (!b.skip.empty()) GTEST_SKIP() << b.skip;
  EngineConfig dev = config(24, 26, true), alone = config(4096, 512, false);
  if (b.emulated) {  // the CPU's kernels on memory called a GPU's: the engine's seam as a GPU's
    dev.device = b.device;
    dev.make_backend = [](Device, const kernels::BackendOptions& o) {
      return std::unique_ptr<kernels::Backend>(std::make_unique<test::EmulatedDevice>(o));
    };
  } else if (b.cpu_isa) {
    dev.backend.max_isa = alone.backend.max_isa = *b.cpu_isa;  // rounding differs by variant
  } else {
    dev.device = b.device;
    // The engine refuses a backend without the model's kernels at load: ask the backend first.
    if (!test::backend_for(b)->missing(models::family_for_checkpoint(dir_.string()).ops).empty())
      GTEST_SKIP() << GetParam() << " has no kernels for some of the model's ops yet";
  }
  const test::AloneVsBatched r = test::expect_batched_match_alone(workload(), alone, dev);
  // A GPU replays its decode steps as graphs (engine/step_graphs.h).
  if (!b.emulated && !b.cpu_isa) {
    std::printf("%s\n",
                engine::step_graphs_text(r.stats.step_graphs, r.stats.step_graph_steps).c_str());
    EXPECT_GT(r.stats.step_graph_steps.replayed, 0) << r.stats.step_graphs;
  }
}

// The same on a GPU with every step eager (no step graphs): where the test above fails and this
// one passes, the graphs are at fault, not the kernels.
TEST_P(EngineDevice, WithoutStepGraphsMatchesTheCpuAlone) {
  const test::BackendParam b = test::parse_backend_param(GetParam());
  if (!b.skip.empty()) GTEST_SKIP() << b.skip;
  if (b.emulated || b.cpu_isa) GTEST_SKIP() << "a device that records step graphs only";
  EngineConfig dev = config(24, 26, true), alone = config(4096, 512, false);
  dev.device = b.device;
  dev.step_graphs.max_rows = 0;
  if (!test::backend_for(b)->missing(models::family_for_checkpoint(dir_.string()).ops).empty())
    GTEST_SKIP() << GetParam() << " has no kernels for some of the model's ops yet";
  const test::AloneVsBatched r = test::expect_batched_match_alone(workload(), alone, dev);
  EXPECT_EQ(r.stats.step_graph_steps.replayed, 0);
}

INSTANTIATE_TEST_SUITE_P(Device, EngineDevice, ::testing::ValuesIn(test::kDevices),
                         test::isa_param_name);

namespace {

// What a step-graph device was asked to do, in order: "size", "capture", "replay", "refuse".
struct GraphLog {
  std::mutex mu;
  std::vector<std::string> calls;
  int replays = 0;
  void add(const std::string& c) {
    std::lock_guard<std::mutex> lk(mu);
    calls.push_back(c);
  }
};

// The emulated device with step graphs of a kind the CPU can keep: a capture records nothing
// and runs no work (a GPU's capture runs none either); every other replay runs the step eagerly
// (a graph that is what was recorded) and the others find "other launches", reporting false
// before any work ran, as a GPU's replay does. The engine's side of the protocol (capture at
// load after sizing every shape, replay only for decode steps, rerun eagerly when refused) is
// what this checks; the CUDA recorder itself needs a GPU (EngineDevice above on `cuda`).
class GraphEmulatedDevice final : public test::EmulatedDevice {
 public:
  GraphEmulatedDevice(const kernels::BackendOptions& o, std::shared_ptr<GraphLog> log)
      : EmulatedDevice(o), log_(std::move(log)) {}
  bool records_step_graphs() const override { return true; }
  void size_step(const std::function<void()>& step) const override {
    log_->add("size");
    step();
  }
  std::unique_ptr<StepGraph> capture_step(const std::function<void()>&,
                                          std::string*) const override {
    log_->add("capture");
    return std::make_unique<StepGraph>();
  }
  bool replay_step(const StepGraph&, const std::function<void()>& step) const override {
    if (log_->replays++ % 2 == 1) {
      log_->add("refuse");
      return false;
    }
    log_->add("replay");
    step();
    return true;
  }

 private:
  std::shared_ptr<GraphLog> log_;
};

}  // namespace

TEST_F(EngineModel, DecodeStepGraphsReplayOrRunEagerlyWithTheSameTokens) {
  auto log = std::make_shared<GraphLog>();
  EngineConfig dev = config(24, 26, true), alone = config(4096, 512, false);
  dev.device = test::kEmulatedDevice;
  dev.step_graphs.max_rows = 4;
  dev.make_backend = [log](Device, const kernels::BackendOptions& o) {
    return std::unique_ptr<kernels::Backend>(std::make_unique<GraphEmulatedDevice>(o, log));
  };
  const test::AloneVsBatched r = test::expect_batched_match_alone(workload(), alone, dev);
  // Captured at load: every size sized first (largest down), then 1..4 captured.
  const std::vector<std::string> load = {"size",    "size",    "size",    "size",
                                         "capture", "capture", "capture", "capture"};
  ASSERT_GE(log->calls.size(), load.size());
  EXPECT_EQ(std::vector<std::string>(log->calls.begin(), log->calls.begin() + 8), load);
  EXPECT_NE(r.stats.step_graphs.find("4 captured"), std::string::npos) << r.stats.step_graphs;
  // Decode steps replayed, and refused ones rerun eagerly, with the tokens of each request alone.
  EXPECT_GT(r.stats.step_graph_steps.replayed, 0);
  EXPECT_GT(r.stats.step_graph_steps.eager, 0);
  EXPECT_EQ(r.stats.step_graph_steps.replayed + r.stats.step_graph_steps.eager, log->replays);
  EXPECT_EQ(std::count(log->calls.begin(), log->calls.end(), "capture"), 4);
}
