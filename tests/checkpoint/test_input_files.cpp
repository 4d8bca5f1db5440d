// Reading files a user names (io/file.h) and bounded JSON (io/json_fields.h): regular files only,
// sizes checked before allocating, nesting bounded before parsing, short quotes in messages.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "io/file.h"
#include "io/json_fields.h"
#include "test_util.h"

using namespace mmrt;
using mmrt::testing::error_of;
using mmrt::testing::TempDir;

TEST(InputFiles, ReadsRegularFilesWithinTheirLimit) {
  TempDir d("files");
  const std::string p = d.file("a.txt");
  mmrt::testing::write_bytes(p, "hello");
  EXPECT_EQ(io::read_file(p, {.what = "note", .max_bytes = 5}), "hello");
  EXPECT_EQ(io::read_file_bytes(p, {.what = "note", .max_bytes = 5}).size(), 5u);
  const std::string big = error_of<ResourceExhausted>(
      [&] { io::read_file(p, {.what = "note", .max_bytes = 4, .option = "--max-note"}); });
  EXPECT_EQ(big, "note '" + p + "' is 5 bytes, over the 4 bytes limit (raise it with --max-note)");
  mmrt::testing::write_bytes(p, "");
  EXPECT_EQ(io::read_file(p, {.what = "note", .max_bytes = 4}), "");
}

TEST(InputFiles, RefusesWhatIsNotARegularFile) {
  TempDir d("files");
  const std::string fifo = d.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_EQ(error_of<InvalidArgument>([&] { io::read_file(fifo, {.what = "config"}); }),
            "config '" + fifo + "' is a FIFO (named pipe), not a regular file");
  EXPECT_EQ(error_of<InvalidArgument>([&] { io::read_file(d.path().string(), {.what = "image"}); }),
            "image '" + d.path().string() + "' is a directory, not a regular file");
  EXPECT_EQ(error_of<InvalidArgument>([&] { io::read_file("/dev/zero", {.what = "image"}); }),
            "image '/dev/zero' is a character device, not a regular file");
  EXPECT_EQ(error_of<NotFound>([&] { io::read_file(d.file("none"), {.what = "image"}); }),
            "image '" + d.file("none") + "' does not exist");
  EXPECT_EQ(error_of<InvalidArgument>([&] { io::read_file("", {.what = "image"}); }),
            "empty path given for the image");
}

TEST(InputFiles, FormatsByteCounts) {
  EXPECT_EQ(io::format_bytes(100), "100 bytes");
  EXPECT_EQ(io::format_bytes(64ull << 20), "64 MiB");
  EXPECT_EQ(io::format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(io::format_bytes(3ull << 40), "3 TiB");
}

TEST(BoundedJson, DepthIsCountedOutsideStringsOnly) {
  const std::string ok = std::string(io::kMaxJsonDepth, '[') + std::string(io::kMaxJsonDepth, ']');
  EXPECT_NO_THROW(io::parse_json(ok, "t"));
  const std::string deep = "[" + ok + "]";
  EXPECT_EQ(error_of<FormatError>([&] { io::parse_json(deep, "t.json"); }),
            "t.json: JSON nests deeper than 128 levels (at byte 128)");
  // Brackets inside strings, escaped quotes included, do not count.
  const std::string in_string =
      "{\"k\": \"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"}";
  EXPECT_NO_THROW(io::parse_json_object(in_string, "t"));
  EXPECT_EQ(error_of<FormatError>([&] { io::parse_json_object("[1]", "t.json"); }),
            "t.json: top level is not a JSON object");
}

TEST(BoundedJson, ExcerptsAreShort) {
  const nlohmann::json big = std::string(10000, 'x');
  const std::string e = io::json_excerpt(big);
  EXPECT_LT(e.size(), 120u);
  EXPECT_NE(e.find("(10002 chars)"), std::string::npos) << e;
  EXPECT_EQ(io::json_excerpt(nlohmann::json::array({1, 2})), "[1,2]");
}

TEST(BoundedJson, AParseErrorQuotesAtMostAShortCutOfTheText) {
  // An unterminated string: the library quotes the whole token, here a megabyte, in its message.
  const std::string open = "{\"messages\": \"" + std::string(1 << 20, 'a');
  const std::string e = error_of<FormatError>([&] { io::parse_json(open, "t"); });
  EXPECT_LT(e.size(), 200u) << e.substr(0, 300);
  EXPECT_EQ(e.rfind("t: not valid JSON: parse error at line 1, column ", 0), 0u) << e;
  EXPECT_NE(e.find("missing closing quote; last read: '\"aaaa"), std::string::npos) << e;
  EXPECT_NE(e.find("...' (cut)"), std::string::npos) << e;
  EXPECT_EQ(e.find("[json.exception"), std::string::npos) << e;
  // A short one keeps the library's whole message, less its tag.
  EXPECT_EQ(error_of<FormatError>([&] { io::parse_json("{\"a\": tru}", "t"); }),
            "t: not valid JSON: parse error at line 1, column 10: syntax error while parsing "
            "value - invalid literal; last read: '\"a\": tru}'");
}
