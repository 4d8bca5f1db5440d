// The engine with tiny LLaVA-NeXT, LLaVA-1.5, Fuyu and Qwen2.5-VL checkpoints, reached only
// through the registry (the engine sees no family; Fuyu's "encoder" is its patch projection): image
// requests batched, chunked and preempted give the tokens each gives alone; a repeated image hits
// the encoder and prefix caches; a corrupt image fails alone; cancellation in the middle of an
// image prefill frees the KV.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "models/registry.h"
#include "models/tiny_registry.h"

namespace fs = std::filesystem;
using namespace mmrt;
using namespace mmrt::engine;

namespace {

class EngineImageFamily : public ::testing::TestWithParam<const char*> {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("mmrt_engine_images_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    for (const char* arch : {"llava-next", "llava", "fuyu", "qwen2.5-vl"}) {
      models::TinyModelOptions o;
      o.dtype = DType::kF32;
      o.seed = 9;
      models::make_tiny_model(models::family_named(arch), (root_ / arch).string(), o);
    }
    // Images of three aspect ratios (anyres grids 2x2, 1x3 and 2x1 at the tiny LLaVA's 112-pixel
    // crops; Fuyu grids of 5x7, 3x10 and 8x5 patches), written by PIL.
    const std::string cmd =
        std::string(MMRT_REF_PYTHON) +
        " -c \"from PIL import Image; import numpy as np; r=np.random.default_rng(3); "
        "[Image.fromarray(r.integers(0,255,(h,w,3),dtype=np.uint8)).save('" +
        root_.string() +
        "/'+n) for n,h,w in [('a.png',150,200),('b.jpg',90,300),('c.png',230,130)]]\"";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static std::vector<uint8_t> bytes(const std::string& name) {
    std::ifstream f(root_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  EngineConfig config(int32_t budget, int32_t kv_blocks, bool prefix = true) const {
    return test::engine_config((root_ / GetParam()).string(), budget, kv_blocks, prefix);
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

  static fs::path root_;
};
fs::path EngineImageFamily::root_;

TEST_P(EngineImageFamily, BatchedChunkedPreemptedAndCachedMatchAlone) {
  // Long enough answers that every request is still decoding when the last one's media is
  // ready, however slow the build (under ASan, Fuyu's 8-14-token answers ended one by one: no
  // preemption).
  std::vector<GenerateRequest> w;
  w.push_back(image_req({"a.png"}, "What is in the image?", 48));
  w.push_back(test::text_request("Tell me about the weather.", 50));
  w.push_back(image_req({"b.jpg", "c.png"}, "Compare the two.", 46));
  w.push_back(image_req({"c.png"}, "What is in the image?", 49));
  // Small chunks (image runs split across steps) and a KV cache too small for the batch.
  const bool next = std::string(GetParam()) == "llava-next";
  const test::AloneVsBatched run = test::expect_batched_match_alone(
      w, config(4096, 512, false), config(40, next ? 40 : 14, true));
  const EngineStats& s = run.stats;
  EXPECT_GT(s.preemptions, 0) << "the KV cache was meant to be too small for the batch";
  EXPECT_GT(s.encoder_hits, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
  // The same text around images of another aspect ratio: another token count (LLaVA-1.5: one
  // 64-token crop for any image).
  const int64_t diff = run.prompt_tokens[3] - run.prompt_tokens[0];
  if (std::string(GetParam()) != "llava")
    EXPECT_NE(diff, 0);
  else
    EXPECT_EQ(diff, 0);
}

TEST_P(EngineImageFamily, RepeatedImageHitsEncoderAndPrefixCaches) {
  auto eng = Engine::create(config(512, 256, true));
  RequestResult first = eng->submit(image_req({"a.png"}, "What is this?", 4)).wait();
  ASSERT_EQ(first.outcome, Outcome::kFinished) << first.reason;
  EXPECT_EQ(eng->stats().encoder_runs, 1);
  GenerateRequest g2 = image_req({"a.png"}, "What is this?", 4);
  g2.messages.push_back(models::ChatMessage::text("assistant", "A picture."));
  g2.messages.push_back(models::ChatMessage::text("user", "Which colours?"));
  RequestResult second = eng->submit(g2).wait();
  ASSERT_EQ(second.outcome, Outcome::kFinished) << second.reason;
  EXPECT_EQ(eng->stats().encoder_runs, 1) << "the image was encoded again";
  EXPECT_EQ(eng->stats().media_skipped, 1) << "a cached image was decoded again";
  EXPECT_GE(second.cached_prompt_tokens, first.prompt_tokens - 16)
      << "the image's KV was not reused";
  // Other text before the image: no KV reuse past it, but the encoder output is reused. Fuyu's
  // prompt puts every image grid first, before BOS and all text, so there the image's KV itself
  // is reused (the prefix cache serves it and the encoder cache is not asked).
  GenerateRequest g3 = image_req({"a.png"}, "Other question", 2);
  g3.messages.insert(g3.messages.begin(), models::ChatMessage::text("system", "Be brief."));
  const RequestResult third = eng->submit(g3).wait();
  ASSERT_EQ(third.outcome, Outcome::kFinished) << third.reason;
  EXPECT_EQ(eng->stats().encoder_runs, 1);
  if (std::string(GetParam()) == "fuyu")
    EXPECT_GE(third.cached_prompt_tokens, 40 - 16) << "a.png's 5x7 grid is 40 tokens";
  else
    EXPECT_GE(eng->stats().encoder_hits, 1);
  // Another tenant: encoded again, nothing shared.
  GenerateRequest g4 = image_req({"a.png"}, "What is this?", 2);
  g4.tenant = "other";
  RequestResult fourth = eng->submit(g4).wait();
  EXPECT_EQ(eng->stats().encoder_runs, 2);
  EXPECT_EQ(fourth.cached_prompt_tokens, 0);
}

TEST_P(EngineImageFamily, CorruptImageFailsAloneAndCancelFreesItsKv) {
  auto eng = Engine::create(config(16, 512, true));
  GenerateRequest bad = image_req({"b.jpg"}, "x", 4);
  bad.media[0].bytes.resize(bad.media[0].bytes.size() / 3);  // a truncated JPEG
  GenerateRequest video = test::text_request("a video", 2);
  video.messages[0].content.insert(video.messages[0].content.begin(),
                                   {models::ContentPart::Kind::kVideo, ""});
  video.media.push_back({models::Modality::kVideo, bytes("a.png"), {}});
  RequestHandle hb = eng->submit(bad);
  RequestHandle hv = eng->submit(video);
  RequestHandle hc = eng->submit(image_req({"c.png"}, "y", 400));
  RequestHandle ht = eng->submit(test::text_request("still served", 3));
  RequestResult rb = hb.wait();
  EXPECT_NE(rb.outcome, Outcome::kFinished);
  EXPECT_FALSE(rb.reason.empty());
  RequestResult rv = hv.wait();
  // A model that takes images only refuses the video; Qwen2.5-VL takes videos, and a PNG is not
  // one.
  EXPECT_NE(rv.outcome, Outcome::kFinished) << "a PNG passed for a video";
  if (std::string(GetParam()) != "qwen2.5-vl") {
    EXPECT_NE(rv.reason.find("video"), std::string::npos) << rv.reason;
  }
  ASSERT_TRUE(hc.next().has_value());  // the image's request is under way
  hc.cancel();
  EXPECT_EQ(hc.wait().outcome, Outcome::kCancelled);
  EXPECT_EQ(ht.wait().outcome, Outcome::kFinished);
  EXPECT_EQ(eng->stats().kv_blocks_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, EngineImageFamily,
                         ::testing::Values("llava-next", "llava", "fuyu", "qwen2.5-vl"),
                         [](const auto& info) {
                           const std::string f = info.param;
                           return f == "llava"        ? std::string("Llava15")
                                  : f == "fuyu"       ? std::string("Fuyu")
                                  : f == "qwen2.5-vl" ? std::string("Qwen25VL")
                                                      : std::string("LlavaNext");
                         });

}  // namespace
