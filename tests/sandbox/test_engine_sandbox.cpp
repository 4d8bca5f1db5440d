// The engine with the media sandbox on: the same tokens as with in-process decoding, bad media
// ends only its own request, and every item went through a worker.
#include "core/error.h"
#include "engine/engine.h"
#include "sandbox_fixture.h"

using namespace mmrt;
using namespace mmrt::engine;
using mmrt::testing::SandboxTest;

namespace {

GenerateRequest image_req(std::vector<std::vector<uint8_t>> images, const std::string& text,
                          const std::string& tenant) {
  GenerateRequest g;
  models::ChatMessage m;
  m.role = "user";
  for (auto& b : images) {
    m.content.push_back({models::ContentPart::Kind::kImage, ""});
    g.add_image(std::move(b));
  }
  m.content.push_back({models::ContentPart::Kind::kText, text});
  g.messages.push_back(m);
  g.sampling.max_tokens = 8;
  g.sampling.ignore_eos = true;
  g.tenant = tenant;
  return g;
}

}  // namespace

TEST_F(SandboxTest, EngineTokensAreTheSameWithTheSandbox) {
  auto run = [&](bool sandboxed) {
    EngineConfig c = engine_config(sandboxed);
    c.media_threads = 2;
    auto eng = Engine::create(c);
    std::vector<RequestHandle> hs;
    hs.push_back(eng->submit(image_req({bytes("a.png")}, "What is it?", "alice")));
    hs.push_back(eng->submit(image_req({bytes("b.jpg"), bytes("a.png")}, "Compare.", "bob")));
    hs.push_back(eng->submit(image_req({bytes("b.jpg")}, "Describe.", "alice")));
    std::vector<std::vector<int32_t>> tokens;
    for (auto& h : hs) {
      RequestResult r = h.wait();
      EXPECT_EQ(r.outcome, Outcome::kFinished) << r.reason;
      tokens.push_back(r.tokens);
    }
    const EngineStats s = eng->stats();
    EXPECT_EQ(s.media_sandbox.items, sandboxed ? 4 : 0);
    return tokens;
  };
  EXPECT_EQ(run(true), run(false));
}

TEST_F(SandboxTest, EngineBadMediaInTheSandboxEndsOnlyItsRequest) {
  auto eng = Engine::create(engine_config(true));
  auto truncated = bytes("b.jpg");
  truncated.resize(truncated.size() / 2);
  RequestHandle bad = eng->submit(image_req({truncated}, "x", "t"));
  RequestHandle good = eng->submit(image_req({bytes("a.png")}, "y", "t"));
  RequestResult rb = bad.wait(), rg = good.wait();
  EXPECT_EQ(rb.outcome, Outcome::kFailed);
  EXPECT_EQ(rb.error, ErrorCode::kFormat) << rb.reason;
  EXPECT_NE(rb.reason.find("JPEG"), std::string::npos) << rb.reason;
  EXPECT_EQ(rg.outcome, Outcome::kFinished) << rg.reason;
  EXPECT_EQ(eng->stats().media_sandbox.failed, 1);  // the worker said so: it ran there
  EXPECT_EQ(eng->stats().media_sandbox.workers_lost, 0);
}

TEST_F(SandboxTest, EngineRefusesToStartWithoutItsWorkers) {
  EngineConfig c;
  c.model_dir = model_dir();
  c.kv.blocks = 64;
  c.media_sandbox = config();
  c.media_sandbox.worker_exe = "/bin/false";
  try {
    Engine::create(c);
    FAIL() << "the engine started without a media worker";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("media sandbox"), std::string::npos) << e.what();
  }
}

// Video decodes in a worker too (FFmpeg under the seccomp allow-list): the same tokens as in
// process, and a damaged clip, whose demuxer logs to stderr (and asks isatty first), fails
// alone without losing the worker.
TEST_F(SandboxTest, EngineVideoInTheSandbox) {
  const std::string d = model_dir();
  ASSERT_EQ(std::system(("cd '" + d +
                         "' && ffmpeg -hide_banner -loglevel error -nostdin -y -f lavfi -i "
                         "testsrc2=s=112x84:r=10:d=2 -c:v libx264 -preset veryfast -pix_fmt "
                         "yuv420p -g 10 v.mp4")
                            .c_str()),
            0);
  auto video_req = [&](std::vector<uint8_t> b) {
    GenerateRequest g;
    models::ChatMessage m;
    m.role = "user";
    m.content.push_back({models::ContentPart::Kind::kVideo, ""});
    m.content.push_back({models::ContentPart::Kind::kText, "What happens?"});
    g.media.push_back({models::Modality::kVideo, std::move(b), {}});
    g.messages.push_back(m);
    g.sampling.max_tokens = 6;
    g.sampling.ignore_eos = true;
    return g;
  };
  auto run = [&](bool sandboxed) {
    auto eng = Engine::create(engine_config(sandboxed, d));
    std::vector<uint8_t> damaged = bytes("v.mp4");
    for (size_t i = 48; i < damaged.size(); i += 97) damaged[i] ^= 0xa5;
    RequestHandle bad = eng->submit(video_req(std::move(damaged)));
    RequestResult r = eng->submit(video_req(bytes("v.mp4"))).wait();
    EXPECT_EQ(r.outcome, Outcome::kFinished) << r.reason;
    (void)bad.wait();  // decodes or fails; either way only its own request
    if (sandboxed) {
      EXPECT_EQ(eng->stats().media_sandbox.workers_lost, 0);
    }
    return r.tokens;
  };
  EXPECT_EQ(run(true), run(false));
}

// A pruned clip (the approximate tier) through a worker: the same features and kept tokens as in
// process, and the engine gives the same tokens for a prompt shorter than the unpruned one.
TEST_F(SandboxTest, PrunedVideoInTheSandbox) {
  const std::string d = model_dir();
  ASSERT_EQ(std::system(("cd '" + d +
                         "' && ffmpeg -hide_banner -loglevel error -nostdin -y -f lavfi -i "
                         "color=c=0x3366aa:s=112x84:r=10:d=3 -f lavfi -i "
                         "color=c=white:s=12x12:r=10:d=3 -filter_complex "
                         "\"[0][1]overlay=x='mod(6*n\\,100)':y=30\" -c:v libx264 -preset "
                         "veryfast -pix_fmt yuv420p -g 10 box.mp4")
                            .c_str()),
            0);
  const std::vector<uint8_t> clip = bytes("box.mp4");
  models::MediaOptions opt;
  opt.video_prune_threshold = 2;
  {
    sandbox::MediaSandbox sb(config(), 1);
    sandbox::Job j;
    j.modality = models::Modality::kVideo;
    j.bytes = clip;
    j.tenant = "t";
    j.options = opt;
    j.estimate = processor_->estimate(models::Modality::kVideo, clip, opt);
    EXPECT_FALSE(j.estimate.exact) << "a pruned clip's estimate is an upper bound";
    const models::PreparedMedia in =
        processor_->preprocess(models::Modality::kVideo, clip, media::MediaContext{}, opt);
    ASSERT_FALSE(in.kept_tokens.empty()) << "nothing was pruned from a mostly static clip";
    EXPECT_LT(in.n_tokens, j.estimate.n_tokens);
    expect_same(sb.preprocess(0, j), in);
    EXPECT_EQ(sb.stats().workers_lost, 0);
  }
  auto run = [&](bool sandboxed, double threshold) {
    auto eng = Engine::create(engine_config(sandboxed, d));
    GenerateRequest g;
    models::ChatMessage m;
    m.role = "user";
    m.content.push_back({models::ContentPart::Kind::kVideo, ""});
    m.content.push_back({models::ContentPart::Kind::kText, "Where is the box?"});
    g.media.push_back({models::Modality::kVideo, clip, {}});
    g.media.back().options.video_prune_threshold = threshold;
    g.messages.push_back(m);
    g.sampling.max_tokens = 6;
    g.sampling.ignore_eos = true;
    RequestResult r = eng->submit(g).wait();
    EXPECT_EQ(r.outcome, Outcome::kFinished) << r.reason;
    return r;
  };
  const RequestResult in = run(false, 2), out = run(true, 2), full = run(true, 0);
  EXPECT_EQ(out.tokens, in.tokens);
  EXPECT_EQ(out.prompt_tokens, in.prompt_tokens);
  EXPECT_LT(out.prompt_tokens, full.prompt_tokens);
}
