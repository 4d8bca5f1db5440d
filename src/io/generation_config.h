// generation_config.json: the checkpoint's default stop tokens and sampling settings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mmrt::io {

struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;  // "eos_token_id": an id or a list
  std::optional<int32_t> pad_token_id;
  std::optional<float> temperature, top_p, repetition_penalty;
  std::optional<int32_t> top_k;
  std::optional<bool> do_sample;
};

// A missing file gives an empty config; a malformed one is a FormatError naming the field.
GenerationConfig load_generation_config(const std::string& path);

}  // namespace mmrt::io
