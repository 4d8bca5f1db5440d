// Shared helpers of the media suite: the reference data set (made once per run by
// tests/reference/media_ref.py under Debian's Python with the real PIL), file and .npy access.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "io/npy.h"
#include "media/image.h"

namespace media_test {

namespace fs = std::filesystem;
using mmrt::Tensor;
using mmrt::io::read_npy;
using mmrt::media::Image;

// The output of one reference script: `tests/reference/<script> --out DIR` run once, into a
// folder of this process's own (several suites run the scripts at once under ctest -j), and its
// manifest.json. The folder goes when the test binary exits, whatever failed.
struct RefRun {
  fs::path dir;
  nlohmann::json manifest;
  std::string error;  // non-empty when the reference script failed

  RefRun(const std::string& script, const std::string& tag) {
    dir = fs::temp_directory_path() / ("mmrt_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string cmd = std::string(MMRT_REF_PYTHON) + " " + MMRT_SOURCE_DIR +
                            "/tests/reference/" + script + " --out " + dir.string();
    if (std::system(cmd.c_str()) != 0) {
      error = "reference script failed: " + cmd;
      return;
    }
    std::ifstream f(dir / "manifest.json");
    manifest = nlohmann::json::parse(f);
  }
  ~RefRun() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
  RefRun(const RefRun&) = delete;
  RefRun& operator=(const RefRun&) = delete;
};
using RefData = RefRun;

// The image data set (all images, one Python call).
inline const RefData& ref_data() {
  static const RefRun data("media_ref.py", "media_ref");
  return data;
}

#define MEDIA_REF_OR_FAIL(var)                                 \
  const ::media_test::RefData& var = ::media_test::ref_data(); \
  ASSERT_TRUE(var.error.empty()) << var.error

inline std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f.good()) << p;
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
}

// A uint8 [H, W, 3] array as an Image.
inline Image image_from_npy(const Tensor& t) {
  EXPECT_EQ(t.dtype(), mmrt::DType::kU8);
  EXPECT_EQ(t.rank(), 3);
  EXPECT_EQ(t.dim(2), 3);
  Image im(static_cast<int>(t.dim(1)), static_cast<int>(t.dim(0)));
  std::memcpy(im.data(), t.raw(), im.size_bytes());
  return im;
}

// Byte-exact comparison with a readable failure: size, mismatch count and the first mismatch.
inline ::testing::AssertionResult same_pixels(const Image& got, const Tensor& want) {
  if (want.rank() != 3 || got.height() != want.dim(0) || got.width() != want.dim(1))
    return ::testing::AssertionFailure()
           << "size " << got.width() << "x" << got.height() << " vs expected " << want.describe();
  const uint8_t* w = want.data<uint8_t>();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size_bytes(); ++i)
    if (got.data()[i] != w[i] && bad++ == 0) first = i;
  if (bad == 0) return ::testing::AssertionSuccess();
  const size_t px = first / 3;
  return ::testing::AssertionFailure()
         << bad << " of " << got.size_bytes() << " bytes differ; first at (x=" << px % got.width()
         << ", y=" << px / got.width() << ", c=" << first % 3 << "): got " << int(got.data()[first])
         << ", expected " << int(w[first]);
}

}  // namespace media_test
