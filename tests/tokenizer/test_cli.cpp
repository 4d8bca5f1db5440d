// `mmrt tokenize` / `mmrt detokenize` on the Qwen3 tokenizer.json: ids, the readable table,
// the accepted id formats and the error messages.
#include <gtest/gtest.h>

#include "io/bpe_trainer.h"
#include "tokenizer_test_util.h"

using namespace mmrt;

namespace {

struct Result {
  int rc;
  std::string out;
};

// Runs `mmrt ARGS` with `input` on stdin; stdout and stderr together.
Result mmrt_cli(const std::string& args, const std::string& input) {
  const auto dir = std::filesystem::path(MMRT_BINARY_DIR) / "tokenizer_test";
  const auto in = dir / "cli_stdin.txt";
  test::write_file(in, input);
  Result r;
  r.out = test::run_command(
      std::string("'") + MMRT_CLI_PATH + "' " + args + " < '" + in.string() + "' 2>&1", r.rc);
  return r;
}

std::string model_dir() {
  return test::qwen3_tokenizer_json().parent_path().string();
}

}  // namespace

TEST(TokenizerCli, TokenizeAndDetokenize) {
  if (!test::require_js_packages()) return;
  const std::string m = " --model '" + model_dir() + "'";
  Result r = mmrt_cli("tokenize" + m + " --ids-only", "Hello world<|im_end|>");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out, "9707 1879 151645\n");
  r = mmrt_cli("tokenize" + m, "Hi\n\t\"x\" 👍");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("\t\"\\n\"\n"), std::string::npos) << r.out;    // escaped newline
  EXPECT_NE(r.out.find("\t\"\\t\"\n"), std::string::npos) << r.out;    // escaped tab
  EXPECT_NE(r.out.find("\t\"\\\"x\"\n"), std::string::npos) << r.out;  // escaped quote
  EXPECT_NE(r.out.find("\\xF0\\x9F"), std::string::npos) << r.out;     // a partial emoji
  r = mmrt_cli("detokenize" + m, "9707, 1879\n151645");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out, "Hello world<|im_end|>");
  r = mmrt_cli("detokenize" + m + " --skip-special", " [9707, 1879, 151645] ");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out, "Hello world");
  // Many texts at once: one JSON string a line in, one JSON array of ids a line out, and back.
  r = mmrt_cli("tokenize" + m + " --jsonl", "\"Hello world<|im_end|>\"\n\n\"\"\n\"a\\nb\"\n");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out, "[9707,1879,151645]\n[]\n[64,198,65]\n");
  r = mmrt_cli("detokenize" + m + " --jsonl", r.out);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out, "\"Hello world<|im_end|>\"\n\"\"\n\"a\\nb\"\n");
}

TEST(TokenizerCli, ClearErrors) {
  // A small trained tokenizer (ids 0..299, specials 300..313) keeps this test quick.
  const auto dir = std::filesystem::path(MMRT_BINARY_DIR) / "tokenizer_test/cli_model";
  io::BpeTrainOptions o;
  o.vocab_size = 300;
  o.special_tokens = mmrt::test::qwen2_specials();
  test::write_file(dir / "tokenizer.json",
                   io::train_byte_level_bpe(io::builtin_training_corpus(), o));
  const std::string m = " --model '" + dir.string() + "'";
  Result r = mmrt_cli("detokenize" + m, "9707 hello");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("'hello' (item 2 on stdin) is not a token id"), std::string::npos) << r.out;
  r = mmrt_cli("detokenize" + m, "97 314");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("token id 314 is out of range [0, 314)"), std::string::npos) << r.out;
  r = mmrt_cli("detokenize" + m, "97 -1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("token id -1 is out of range"), std::string::npos) << r.out;
  r = mmrt_cli("detokenize" + m, "97,123456789012345678901");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("token id 123456789012345678901 (item 2) is out of range"),
            std::string::npos)
      << r.out;
  r = mmrt_cli("detokenize" + m, "[1, \"2\"]");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("element 1 of the JSON array"), std::string::npos) << r.out;
  r = mmrt_cli("tokenize --model /nonexistent/model", "x");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("/nonexistent/model: no such folder"), std::string::npos) << r.out;
  const auto empty = std::filesystem::path(MMRT_BINARY_DIR) / "tokenizer_test/empty_model";
  std::filesystem::create_directories(empty);
  r = mmrt_cli("tokenize --model '" + empty.string() + "'", "x");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(
      r.out.find("tokenizer file '" + (empty / "tokenizer.json").string() + "' does not exist"),
      std::string::npos)
      << r.out;
  r = mmrt_cli("tokenize" + m + " --jsonl", "\"ok\"\nplain text\n");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("stdin line 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--jsonl expects one JSON string a line"), std::string::npos) << r.out;
  r = mmrt_cli("tokenize" + m + " --jsonl", "[1, 2]\n");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("is not a JSON string"), std::string::npos) << r.out;
  r = mmrt_cli("detokenize" + m + " --jsonl", "[97]\n[97, 314]\n");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("stdin line 2: decode: token id 314 is out of range"), std::string::npos)
      << r.out;
  r = mmrt_cli("tokenize --help", "");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("--ids-only"), std::string::npos);
}
