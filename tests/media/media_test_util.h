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

struct RefData {
  fs::path dir;
  nlohmann::json manifest;
  std::string error;  // non-empty when the reference script failed
};

// Removes the process's reference data when the test binary exits, whatever failed.
struct RefDataCleanup {
  fs::path dir;
  ~RefDataCleanup() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

// Runs the reference script once per process (all images, one Python call), into a folder of
// this process's own (several suites use the data set at once under ctest -j).
inline const RefData& ref_data() {
  static RefData data;
  static RefDataCleanup cleanup;
  static std::once_flag once;
  std::call_once(once, [] {
    data.dir = fs::temp_directory_path() / ("mmrt_media_ref_" + std::to_string(::getpid()));
    cleanup.dir = data.dir;
    fs::remove_all(data.dir);
    fs::create_directories(data.dir);
    const std::string cmd = std::string(MMRT_REF_PYTHON) + " " + MMRT_SOURCE_DIR +
                            "/tests/reference/media_ref.py --out " + data.dir.string();
    if (std::system(cmd.c_str()) != 0) {
      data.error = "reference script failed: " + cmd;
      return;
    }
    std::ifstream f(data.dir / "manifest.json");
    data.manifest = nlohmann::json::parse(f);
  });
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
