// The engine with tiny Qwen2-VL and Qwen2.5-VL checkpoints and video input (clips made with the
// ffmpeg CLI from lavfi sources): video requests batched, chunked and preempted beside images and
// text give the tokens each gives alone; a repeated clip hits the encoder and prefix caches without
// being decoded again; a static clip's slices are encoded once with the same tokens as without the
// reuse; a damaged clip fails alone; a model without video input refuses a video clearly.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
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

// 2 s at 10 fps -> 4 sampled frames, 2 slices; the static clip's slices are identical.
constexpr const char* kMakeClips = R"sh(set -e
F="ffmpeg -hide_banner -loglevel error -nostdin -y"
H264="-c:v libx264 -preset veryfast -pix_fmt yuv420p -g 10"
$F -f lavfi -i testsrc2=s=112x84:r=10:d=2 $H264 moving.mp4
$F -f lavfi -i color=c=gray:s=112x84:r=10:d=2 $H264 static.mp4
$F -f lavfi -i testsrc2=s=84x56:r=10:d=3 -c:v libvpx-vp9 -deadline realtime -cpu-used 8 \
   -pix_fmt yuv420p other.webm
$F -f lavfi -i testsrc2=s=56x56:r=10:d=0.2 -frames:v 1 image.png
$F -f lavfi -i color=c=0x3366aa:s=112x84:r=10:d=3 -f lavfi -i color=c=white:s=12x12:r=10:d=3 \
   -filter_complex "[0][1]overlay=x='mod(6*n\,100)':y=30" $H264 box.mp4
# A stream cut into segments: 4 s at 2 fps (8 frames, all sampled) and its two halves (4 frames
# each, all sampled), lossless, so the halves decode to the whole clip's frames.
L="-c:v libx264 -preset veryfast -qp 0 -pix_fmt yuv420p"
$F -f lavfi -i testsrc2=s=112x84:r=2:d=4 $L whole.mp4
$F -f lavfi -i testsrc2=s=112x84:r=2:d=4 -vf trim=end_frame=4 $L half0.mp4
$F -f lavfi -i testsrc2=s=112x84:r=2:d=4 -vf trim=start_frame=4,setpts=PTS-STARTPTS $L half1.mp4
)sh";

// Both Qwen vision-language families: the same processor and runner, Qwen2.5-VL with its own
// tower and time-scaled video positions (streamed segments must continue one time axis).
class EngineVideo : public ::testing::TestWithParam<const char*> {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("mmrt_engine_video_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* arch : {"qwen2-vl", "qwen2.5-vl"}) {
      models::TinyModelOptions o;
      o.dtype = DType::kF32;
      o.seed = 9;
      models::make_tiny_model(models::family_named(arch), (dir_ / arch).string(), o);
    }
    std::ofstream(dir_ / "make.sh") << kMakeClips;
    ASSERT_EQ(std::system(("cd '" + dir_.string() + "' && bash make.sh").c_str()), 0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::vector<uint8_t> bytes(const std::string& name) {
    std::ifstream f(dir_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  EngineConfig config(int32_t budget, int32_t kv_blocks, bool prefix = true) const {
    return test::engine_config((dir_ / GetParam()).string(), budget, kv_blocks, prefix);
  }
  // Media named *.png are images, the rest videos (pruned at `prune`, the approximate tier).
  static GenerateRequest req(const std::vector<std::string>& media, const std::string& text,
                             int max_tokens, double prune = 0) {
    GenerateRequest g;
    models::ChatMessage m;
    m.role = "user";
    for (const auto& name : media) {
      const bool image = name.ends_with(".png");
      m.content.push_back(
          {image ? models::ContentPart::Kind::kImage : models::ContentPart::Kind::kVideo, ""});
      g.media.push_back(
          {image ? models::Modality::kImage : models::Modality::kVideo, bytes(name), {}, {}});
      if (!image) g.media.back().options.video_prune_threshold = prune;
    }
    m.content.push_back({models::ContentPart::Kind::kText, text});
    g.messages.push_back(m);
    g.sampling.max_tokens = max_tokens;
    g.sampling.ignore_eos = true;
    return g;
  }

  // One user message: the videos `segments`, each continuing the one before, then `text`.
  static GenerateRequest segments(const std::vector<std::string>& names, const std::string& text,
                                  int max_tokens) {
    GenerateRequest g;
    models::ChatMessage m;
    m.role = "user";
    for (const auto& name : names) {
      m.content.push_back({models::ContentPart::Kind::kVideo, ""});
      m.content.back().continues = m.content.size() > 1;
      g.media.push_back({models::Modality::kVideo, bytes(name), {}, {}});
    }
    if (!text.empty()) m.content.push_back({models::ContentPart::Kind::kText, text});
    g.messages.push_back(m);
    g.sampling.max_tokens = max_tokens;
    g.sampling.ignore_eos = true;
    return g;
  }

  static fs::path dir_;
};
fs::path EngineVideo::dir_;

TEST_P(EngineVideo, BatchedChunkedPreemptedAndCachedMatchAlone) {
  // Long enough answers that every request is still decoding when the last one's media is
  // ready, however slow the build (under ASan, 8-token answers ended one by one: no preemption).
  std::vector<GenerateRequest> w;
  w.push_back(req({"moving.mp4"}, "What happens?", 48));
  w.push_back(test::text_request("Tell me about the weather.", 50));
  w.push_back(req({"image.png", "other.webm"}, "Compare them.", 46));
  w.push_back(req({"static.mp4", "moving.mp4"}, "Which one moves?", 49));
  // Small chunks (video runs split across steps) and a KV cache too small for the batch.
  const EngineStats s =
      test::expect_batched_match_alone(w, config(4096, 512, false), config(32, 44, true)).stats;
  EXPECT_GT(s.preemptions, 0) << "the KV cache was meant to be too small for the batch";
  EXPECT_GT(s.encoder_hits, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

TEST_P(EngineVideo, RepeatedClipHitsBothCachesWithoutDecoding) {
  auto eng = Engine::create(config(512, 256, true));
  RequestResult first = eng->submit(req({"moving.mp4"}, "What is this?", 4)).wait();
  ASSERT_EQ(first.outcome, Outcome::kFinished) << first.reason;
  EXPECT_EQ(eng->stats().encoder_runs, 1);
  GenerateRequest g2 = req({"moving.mp4"}, "What is this?", 4);
  g2.messages.push_back(models::ChatMessage::text("assistant", "A pattern."));
  g2.messages.push_back(models::ChatMessage::text("user", "Which colours?"));
  RequestResult second = eng->submit(g2).wait();
  ASSERT_EQ(second.outcome, Outcome::kFinished) << second.reason;
  EXPECT_EQ(eng->stats().encoder_runs, 1) << "the clip was encoded again";
  EXPECT_EQ(eng->stats().media_skipped, 1) << "a cached clip was decoded again";
  EXPECT_GE(second.cached_prompt_tokens, first.prompt_tokens - 16)
      << "the clip's KV was not reused";
}

TEST_P(EngineVideo, StaticSlicesEncodedOnceGiveTheSameTokens) {
  auto run = [&](bool reuse) {
    EngineConfig c = config(512, 256, false);
    c.model.video_slice_reuse = reuse;
    auto eng = Engine::create(c);
    RequestResult r = eng->submit(req({"static.mp4"}, "Describe.", 6)).wait();
    EXPECT_EQ(r.outcome, Outcome::kFinished) << r.reason;
    return r.tokens;
  };
  EXPECT_EQ(run(true), run(false));
}

// The approximate tier: a pruned clip prefills fewer tokens; pruned and unpruned requests for
// the same clip (different cache keys) batched, chunked and preempted give what each gives
// alone; the same clip at the same threshold again hits the encoder cache.
TEST_P(EngineVideo, PrunedClipsKeepTheirOwnCacheEntriesAndMatchAlone) {
  auto eng = Engine::create(config(512, 256, true));
  RequestResult full = eng->submit(req({"box.mp4"}, "Where is the box?", 4)).wait();
  RequestResult pruned = eng->submit(req({"box.mp4"}, "Where is the box?", 4, 2.0)).wait();
  ASSERT_EQ(full.outcome, Outcome::kFinished) << full.reason;
  ASSERT_EQ(pruned.outcome, Outcome::kFinished) << pruned.reason;
  // 3 s at 10 fps: 6 frames resized up to the minimum pixel budget (392x280), 3 slices of
  // 10x14 merged tokens; the first slice is kept whole, of the other two only the tokens the
  // box crosses (it moves 105 resized pixels between slices).
  const int64_t slice = 140, text = full.prompt_tokens - 3 * slice;
  EXPECT_LT(pruned.prompt_tokens, text + 2 * slice);
  EXPECT_GT(pruned.prompt_tokens, text + slice);
  EXPECT_EQ(eng->stats().encoder_runs, 2) << "pruned and full clips share an encoder entry";
  EXPECT_EQ(eng->stats().media_skipped, 0);
  RequestResult again = eng->submit(req({"box.mp4"}, "Where is it now?", 4, 2.0)).wait();
  ASSERT_EQ(again.outcome, Outcome::kFinished) << again.reason;
  EXPECT_EQ(eng->stats().encoder_runs, 2) << "the pruned clip was encoded again";
  // Its kept tokens were remembered from the second request: laid out exactly before any
  // decoding, with its features cached it was not decoded at all, and answers as on its own.
  EXPECT_EQ(eng->stats().media_skipped, 1) << "the pruned clip was decoded again";
  RequestResult alone = Engine::create(config(512, 256, true))
                            ->submit(req({"box.mp4"}, "Where is it now?", 4, 2.0))
                            .wait();
  ASSERT_EQ(alone.outcome, Outcome::kFinished) << alone.reason;
  EXPECT_EQ(again.tokens, alone.tokens);
  EXPECT_EQ(again.prompt_tokens, alone.prompt_tokens);

  std::vector<GenerateRequest> w;
  w.push_back(req({"box.mp4"}, "What happens?", 40, 2.0));
  w.push_back(req({"box.mp4"}, "What happens?", 42));
  w.push_back(test::text_request("Tell me about the weather.", 44));
  w.push_back(req({"static.mp4", "box.mp4"}, "Which one moves?", 41, 8.0));
  const EngineStats s =
      test::expect_batched_match_alone(w, config(4096, 512, false), config(24, 32, true)).stats;
  EXPECT_GT(s.preemptions, 0) << "the KV cache was meant to be too small for the batch";
  EXPECT_EQ(s.kv_blocks_used, 0);
}

// Streaming as a growing request: a clip's segments, each continuing the one before, answer
// exactly as the whole clip; sent as they arrive (a 1-token request per segment), each segment
// is decoded and encoded once, and the question reuses the KV of the whole video.
TEST_P(EngineVideo, StreamedSegmentsAnswerAsTheWholeClip) {
  const std::string q = "What happens in this video?";
  RequestResult whole =
      Engine::create(config(512, 256, true))->submit(req({"whole.mp4"}, q, 6)).wait();
  ASSERT_EQ(whole.outcome, Outcome::kFinished) << whole.reason;
  RequestResult cut = Engine::create(config(512, 256, true))
                          ->submit(segments({"half0.mp4", "half1.mp4"}, q, 6))
                          .wait();
  ASSERT_EQ(cut.outcome, Outcome::kFinished) << cut.reason;
  EXPECT_EQ(cut.tokens, whole.tokens);
  EXPECT_EQ(cut.prompt_tokens, whole.prompt_tokens);

  auto eng = Engine::create(config(512, 256, true));
  for (const auto& sent : {std::vector<std::string>{"half0.mp4"}, {"half0.mp4", "half1.mp4"}}) {
    RequestResult r = eng->submit(segments(sent, "", 1)).wait();
    ASSERT_EQ(r.outcome, Outcome::kFinished) << r.reason;
  }
  EXPECT_EQ(eng->stats().encoder_runs, 2) << "a segment was encoded twice";
  EXPECT_EQ(eng->stats().media_skipped, 1) << "the first segment was decoded again";
  RequestResult asked = eng->submit(segments({"half0.mp4", "half1.mp4"}, q, 6)).wait();
  ASSERT_EQ(asked.outcome, Outcome::kFinished) << asked.reason;
  EXPECT_EQ(asked.tokens, whole.tokens);
  EXPECT_EQ(eng->stats().encoder_runs, 2);
  EXPECT_EQ(eng->stats().media_skipped, 3) << "a segment was decoded for the question";
  // 4 slices of 10x14 merged tokens: all of them, less the last partial KV block, were cached.
  EXPECT_GE(asked.cached_prompt_tokens, 4 * 140) << "the video's KV was not reused";
}

TEST_P(EngineVideo, DamagedClipFailsAloneAndOthersAreServed) {
  auto eng = Engine::create(config(64, 512, true));
  GenerateRequest bad = req({"moving.mp4"}, "x", 4);
  bad.media[0].bytes.resize(bad.media[0].bytes.size() / 3);  // the index is at the end
  GenerateRequest garbage = req({"moving.mp4"}, "x", 4);
  garbage.media[0].bytes.assign(5000, 0x5a);
  RequestHandle hb = eng->submit(bad), hg = eng->submit(garbage);
  RequestHandle hv = eng->submit(req({"other.webm"}, "y", 5));
  RequestHandle ht = eng->submit(test::text_request("still served", 3));
  for (RequestHandle* h : {&hb, &hg}) {
    RequestResult r = h->wait();
    EXPECT_NE(r.outcome, Outcome::kFinished);
    EXPECT_TRUE(r.error == ErrorCode::kFormat || r.error == ErrorCode::kInvalidArgument)
        << r.reason;
    EXPECT_FALSE(r.reason.empty());
  }
  EXPECT_EQ(hv.wait().outcome, Outcome::kFinished);
  EXPECT_EQ(ht.wait().outcome, Outcome::kFinished);
  EXPECT_EQ(eng->stats().kv_blocks_used, 0);
}

TEST_P(EngineVideo, AModelWithoutVideoInputRefusesItByName) {
  const fs::path audio_dir = dir_ / (std::string("audio_model_") + GetParam());
  models::TinyModelOptions o;
  o.dtype = DType::kF32;
  models::make_tiny_model(models::family_named("qwen2-audio"), audio_dir.string(), o);
  auto eng = Engine::create(test::engine_config(audio_dir.string(), 512, 128));
  GenerateRequest g = req({"moving.mp4"}, "x", 2);
  RequestResult r = eng->submit(g).wait();
  EXPECT_NE(r.outcome, Outcome::kFinished);
  EXPECT_NE(r.reason.find("video"), std::string::npos) << r.reason;
}

INSTANTIATE_TEST_SUITE_P(Families, EngineVideo, ::testing::Values("qwen2-vl", "qwen2.5-vl"),
                         [](const auto& info) {
                           return std::string(info.param) == "qwen2-vl" ? std::string("Qwen2VL")
                                                                        : std::string("Qwen25VL");
                         });

}  // namespace
