// Reading a file a user or a checkpoint names, safely: only a regular file is opened for reading
// (a FIFO, a device, a socket or a directory is refused before anything can block), its size is
// checked against a stated limit before any allocation, and every error names the path and what
// the file was for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mmrt::io {

struct FileLimit {
  const char* what = "file";  // "config.json", "image", "prompt file": named in messages
  uint64_t max_bytes = 64ull << 20;
  const char* option = nullptr;  // the option that raises the limit ("--max-image-bytes"), if any
};

// JSON metadata files (config.json, tokenizer.json, preprocessor_config.json, ...).
inline constexpr uint64_t kMaxJsonFileBytes = 256ull << 20;

// The whole file. NotFound when it does not exist (or cannot be opened), InvalidArgument when it
// is not a regular file, ResourceExhausted when it is larger than `limit.max_bytes`.
std::string read_file(const std::string& path, const FileLimit& limit);
std::vector<uint8_t> read_file_bytes(const std::string& path, const FileLimit& limit);
// Standard input to its end, at most `limit.max_bytes` (ResourceExhausted past that).
std::string read_stdin(const FileLimit& limit);
// "1.5 GiB", "64 MiB", "512 bytes": a byte count for messages.
std::string format_bytes(uint64_t n);

}  // namespace mmrt::io
