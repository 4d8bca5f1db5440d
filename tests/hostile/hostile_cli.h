// What the hostile-input suites share (test_hostile_cli.cpp, test_hostile_audio.cpp): the real
// `mmrt` binary run under a timeout and a resident-memory ceiling (tests/common/run_process.h),
// and the checks every refused case must pass.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../common/run_process.h"

namespace mmrt::hostile {

using mmrt::testing::RunLimits;
using mmrt::testing::RunResult;

inline const std::string kMmrt = std::string(MMRT_BINARY_DIR) + "/tools/mmrt";
// Far below what every defect here reached (0.4-24 GB), far above a tiny model's load (ASan
// included) with the small KV cache the cases ask for.
constexpr long kRssLimitKb = 768L << 10;

// Runs `mmrt args...` in `dir` (which holds its captured stdout and stderr).
inline RunResult run_mmrt(std::vector<std::string> args, const std::filesystem::path& dir,
                          RunLimits lim = {}) {
  args.insert(args.begin(), kMmrt);
  if (lim.rss_limit_kb == RunLimits{}.rss_limit_kb) lim.rss_limit_kb = kRssLimitKb;
  lim.timeout_s = 60;
  RunResult r = mmrt::testing::run_process(args, lim, dir.string());
  std::printf("  [case] mmrt %s: rc %d, peak_rss_kb %ld\n", args[1].c_str(), r.rc, r.peak_rss_kb);
  return r;
}

// The checks every case shares: a clean failure, bounded, and a message with `expect` in it.
inline void expect_refused(const RunResult& r, const std::string& expect) {
  EXPECT_FALSE(r.timed_out) << "hung: killed after the timeout; stderr: " << r.err;
  EXPECT_FALSE(r.over_memory) << "killed at the memory ceiling (" << r.peak_rss_kb << " KiB)";
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find(expect), std::string::npos) << "expected '" << expect << "' in: " << r.err;
  EXPECT_LT(r.err.size(), 4096u) << "a message this long quotes too much of the input";
  EXPECT_LT(r.peak_rss_kb, kRssLimitKb);
}

inline void write_file(const std::filesystem::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

}  // namespace mmrt::hostile
