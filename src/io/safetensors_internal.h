// Internal: what the safetensors reader and writer share (file names of a checkpoint folder).
#pragma once

#include <string>

namespace mmrt::io::detail {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

inline std::string quote(const std::string& s) {
  return "'" + s + "'";
}

}  // namespace mmrt::io::detail
