// safetensors reading (mmap, zero-copy tensor views, sharded checkpoints) and writing.
// Every malformed-file case throws FormatError naming the file, the tensor and the problem.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace mmrt::io {

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  std::string file;         // the shard it lives in
  uint64_t begin = 0, end = 0;  // byte range within the file's data section
};

// A read-only set of tensors from one .safetensors file or a sharded checkpoint.
// Tensors returned by get() are views into the mapped files and keep them mapped.
class SafeTensors {
 public:
  // `path` may be: a .safetensors file; a model.safetensors.index.json; or a directory holding
  // either model.safetensors or model.safetensors.index.json.
  static SafeTensors open(const std::string& path);

  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // NotFound if absent
  Tensor get(const std::string& name) const;             // zero-copy view; NotFound if absent
  std::vector<std::string> names() const;                // sorted
  size_t size() const;
  uint64_t total_bytes() const;                          // sum of tensor byte lengths
  std::vector<std::string> files() const;
  const std::map<std::string, std::string>& metadata() const;  // "__metadata__" of the first file

  SafeTensors(SafeTensors&&) noexcept;
  SafeTensors& operator=(SafeTensors&&) noexcept;
  ~SafeTensors();

 private:
  struct Impl;
  explicit SafeTensors(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes one .safetensors file (tensors sorted by name in the header, data 8-byte aligned as the
// reference writer does).
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes model.safetensors when the total fits in max_shard_bytes, otherwise
// model-0000i-of-0000N.safetensors shards plus model.safetensors.index.json (HF layout).
// Returns the files written (relative names).
std::vector<std::string> write_checkpoint(const std::string& dir, const NamedTensors& tensors,
                                          uint64_t max_shard_bytes,
                                          const std::map<std::string, std::string>& metadata = {});

}  // namespace mmrt::io
