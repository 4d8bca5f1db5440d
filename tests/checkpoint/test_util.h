// Helpers shared by the checkpoint tests: scratch folders, raw safetensors bytes, error capture.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "../common/error_of.h"
#include "core/error.h"

namespace mmrt::testing {

namespace fs = std::filesystem;

// A scratch folder removed when the object goes out of scope.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "ckpt") {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("mmrt_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from a literal header and data section; `header_len` overrides the length
// field (for malformed-length cases).
inline std::string raw_safetensors(const std::string& header, const std::string& data,
                                   int64_t header_len = -1) {
  uint64_t n = header_len >= 0 ? static_cast<uint64_t>(header_len) : header.size();
  return le64(n) + header + data;
}

// Runs a shell command; returns its exit status and combined stdout+stderr.
inline int run_command(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* p = ::popen(full.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  output->clear();
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) output->append(buf, n);
  int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace mmrt::testing
