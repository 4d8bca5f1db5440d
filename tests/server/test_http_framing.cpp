// The HTTP layer's own framing rules (http_framing.h): what passes, what is 501 and 400, and that
// the coding is quoted short and cleaned. The raw-socket checks in checks_hostile.py drive the
// same rules through a real server.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "server/http_framing.h"

using mmrt::server::framing_error;

namespace {

std::string check(const char* te, bool cl, int* status_out = nullptr) {
  int status = 0;
  std::string_view v = te ? std::string_view(te) : std::string_view();
  std::string why = framing_error(te ? &v : nullptr, cl, status);
  if (status_out) *status_out = status;
  return why;
}

}  // namespace

TEST(HttpFraming, ChunkedAloneOrNothingPasses) {
  EXPECT_EQ(check(nullptr, false), "");
  EXPECT_EQ(check(nullptr, true), "");
  EXPECT_EQ(check("chunked", false), "");
  EXPECT_EQ(check(" Chunked\t", false), "");
}

TEST(HttpFraming, OtherCodingsAre501AndTwoLengths400) {
  int status = 0;
  for (const char* te :
       {"gzip, chunked", "chunked, chunked", "identity", "gzip", "", "chunked;q=1"}) {
    SCOPED_TRACE(te);
    EXPECT_NE(check(te, false, &status).find("only chunked (alone)"), std::string::npos);
    EXPECT_EQ(status, 501);
  }
  EXPECT_EQ(check("chunked", true, &status),
            "a request may not carry both Transfer-Encoding and Content-Length");
  EXPECT_EQ(status, 400);
}

TEST(HttpFraming, TheCodingIsQuotedShortAndClean) {
  const std::string long_te(5000, 'x');
  const std::string why = check(long_te.c_str(), false);
  EXPECT_LT(why.size(), 150u);
  EXPECT_EQ(check("a\"b\\c\x01", false),
            "Transfer-Encoding 'a?b?c?' is not supported: only chunked (alone) is");
}
