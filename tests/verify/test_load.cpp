// The open-loop client's failure paths (no server needed): a body that cannot be built stops the
// run with its error instead of the process, a refused connection is an error observation, and
// base64 against RFC 4648's test vectors.
#include <gtest/gtest.h>

#include <stdexcept>

#include "core/base64.h"
#include "core/error.h"
#include "verify/load.h"

namespace mmrt::verify {
namespace {

// A loopback port nothing listens on (port 1 is tcpmux; connecting is refused at once).
constexpr const char* kDeadUrl = "http://127.0.0.1:1";

TEST(Load, ABodyThatCannotBeBuiltStopsTheRunWithItsError) {
  LoadOptions o{.base_url = kDeadUrl, .timeout_s = 2};
  const std::vector<double> times = {0.0, 0.02, 0.04};
  EXPECT_THROW(run_open_loop(
                   times,
                   [](size_t i) -> std::string {
                     if (i == 1) throw NotFound("image vanished");
                     return "{}";
                   },
                   o),
               NotFound);
}

TEST(Load, RefusedConnectionsAreErrorsWithTheirCause) {
  LoadOptions o{.base_url = kDeadUrl, .timeout_s = 2};
  const auto got = run_open_loop(
      {0.0, 0.01}, [](size_t) { return std::string("{}"); }, o);
  ASSERT_EQ(got.size(), 2u);
  for (const auto& x : got) {
    EXPECT_EQ(x.status, Status::kError);
    EXPECT_FALSE(x.error.empty());
    EXPECT_GE(x.sent_ns, x.scheduled_ns);
    EXPECT_GE(x.done_ns, x.sent_ns);
    EXPECT_TRUE(x.chunk_ns.empty());
  }
  EXPECT_EQ(got[1].scheduled_ns - got[0].scheduled_ns, 10'000'000);
}

TEST(Load, BadUrlsAndTimesAreRefused) {
  LoadOptions o{.base_url = "ftp://x"};
  EXPECT_THROW(run_open_loop(
                   {0.0}, [](size_t) { return std::string(); }, o),
               InvalidArgument);
  o.base_url = kDeadUrl;
  EXPECT_THROW(run_open_loop(
                   {1.0, 0.5}, [](size_t) { return std::string(); }, o),
               InvalidArgument);
}

TEST(Load, Base64MatchesRfc4648) {
  auto b = [](const std::string& s) {
    return base64_encode(s);
  };
  EXPECT_EQ(b(""), "");
  EXPECT_EQ(b("f"), "Zg==");
  EXPECT_EQ(b("fo"), "Zm8=");
  EXPECT_EQ(b("foo"), "Zm9v");
  EXPECT_EQ(b("foob"), "Zm9vYg==");
  EXPECT_EQ(b("fooba"), "Zm9vYmE=");
  EXPECT_EQ(b("foobar"), "Zm9vYmFy");
}

}  // namespace
}  // namespace mmrt::verify
