// A .npy file read back through io::read_npy, as plain data. (Its own translation unit: the CLI
// tests' `mmrt(...)` helper would clash with the mmrt namespace.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct NpyFile {
  std::string dtype;  // "F32", "I32", ... (core/dtype.h's names)
  std::vector<int64_t> shape;
  std::vector<float> f32;    // the values of an F32 file
  std::vector<int32_t> i32;  // the values of an I32 file
};

NpyFile read_npy_file(const std::string& path);
