// The media worker's memory limit (RLIMIT_DATA), which sanitizer builds cannot run under (their
// shadow memory alone exceeds it): a decompression bomb that passes the header checks fails
// cleanly at the limit, and the same worker goes on serving; through `mmrt generate` too.
#include "../common/run_process.h"
#include "core/error.h"
#include "sandbox_fixture.h"

using namespace mmrt;
using namespace mmrt::sandbox;
using mmrt::testing::SandboxTest;

TEST_F(SandboxTest, BombHitsTheMemoryLimitAndFailsCleanly) {
  const auto bomb = bytes("bomb.png");  // 6000 x 6000 of one colour: a small file, 36 Mpixel
  ASSERT_LT(bomb.size(), 1u << 20);
  // In this process it decodes (36 Mpixel is under the 50 Mpixel header limit) ...
  const models::PreparedMedia whole = in_process(bomb);
  ASSERT_GT(whole.features.nbytes(), 100u << 20);
  // ... but a worker allowed 32 MiB of heap cannot hold the resized image.
  auto c = config();
  c.memory_bytes = int64_t{32} << 20;
  MediaSandbox sb(c, 1);
  const pid_t pid = sb.worker_pid(0);
  try {
    sb.preprocess(0, job(bomb));
    FAIL() << "the bomb was decoded within 32 MiB";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
    const std::string m = e.what();
    EXPECT_TRUE(m.find("out of memory") != std::string::npos ||
                m.find("cannot allocate") != std::string::npos)
        << m;
  }
  const auto small = bytes("b.jpg");
  expect_same(sb.preprocess(0, job(small)), in_process(small));
  EXPECT_EQ(sb.worker_pid(0), pid);  // a limit hit is an error, not a lost worker
  // With the default limit the same bomb goes through, bit-identical.
  MediaSandbox roomy(config(), 1);
  expect_same(roomy.preprocess(0, job(bomb)), whole);
}

// The same bomb as a user would send it: `mmrt generate` fails with exit code 1 and says why,
// and the server process itself stays small (the worker holds the decode, within its limit).
TEST_F(SandboxTest, CliBombFailsAtTheWorkersLimit) {
  const std::string scratch = model_dir() + "/cli";
  std::filesystem::create_directories(scratch);
  mmrt::testing::RunLimits lim;
  lim.timeout_s = 60;
  lim.rss_limit_kb = 768L << 10;
  const mmrt::testing::RunResult r = mmrt::testing::run_process(
      {MMRT_EXE, "generate", "--model", model_dir(), "--prompt", "what is it?", "--image",
       model_dir() + "/bomb.png", "--kv-mb", "16", "--max-tokens", "2", "--media-memory-mb", "32"},
      lim, scratch);
  EXPECT_FALSE(r.timed_out);
  EXPECT_FALSE(r.over_memory) << r.peak_rss_kb;
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("resource_exhausted"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("32 MiB"), std::string::npos) << r.err;
  EXPECT_LT(r.peak_rss_kb, 256L << 10) << "the server decoded the bomb itself?";
  std::printf("  [case] bomb through generate: rc %d, server peak_rss_kb %ld\n  %s", r.rc,
              r.peak_rss_kb, r.err.c_str());
}
