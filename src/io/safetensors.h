// safetensors reading (mmap, zero-copy tensor views, sharded checkpoints) and writing.
// Every malformed-file case throws FormatError naming the file, the tensor and the problem.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace mmrt {
class ThreadPool;
}

namespace mmrt::io {

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  std::string file;             // the shard it lives in (path as opened)
  uint64_t begin = 0, end = 0;  // byte range within the file's data section
};

// Validates the bytes of one .safetensors file exactly as SafeTensors::open does (header length,
// JSON, names, dtypes, shapes, offsets, overlaps) and returns its tensors (`file` = origin).
// FormatError naming `origin` and the problem.
std::vector<TensorInfo> parse_safetensors(std::span<const uint8_t> file, const std::string& origin);

// A read-only set of tensors from one .safetensors file or a sharded checkpoint.
// Tensors returned by get() are views into the mapped files and keep them mapped. The mapping is
// read-only: writing through a view's raw() pointer faults. A tensor whose data is not aligned to
// its element size (possible only in files from non-reference writers) is returned as an aligned
// copy instead.
class SafeTensors {
 public:
  // `path` may be: a .safetensors file; a model.safetensors.index.json; or a directory holding
  // either model.safetensors or model.safetensors.index.json (the index wins when both exist).
  // Sharded checkpoints are checked: every shard in the index exists, every tensor is in the
  // shard the index names, no tensor appears in two shards or is missing from the index.
  static SafeTensors open(const std::string& path);

  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // NotFound if absent
  Tensor get(const std::string& name) const;              // zero-copy view; NotFound if absent
  std::vector<std::string> names() const;                 // sorted
  size_t size() const;
  uint64_t total_bytes() const;  // sum of tensor byte lengths
  std::vector<std::string> files() const;
  const std::map<std::string, std::string>& metadata() const;  // "__metadata__" of the first file
  const std::string& path() const;                             // as given to open()

  SafeTensors(SafeTensors&&) noexcept;
  SafeTensors& operator=(SafeTensors&&) noexcept;
  ~SafeTensors();

 private:
  struct Impl;
  explicit SafeTensors(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes one .safetensors file (tensors sorted by name in the header and the data, header padded
// with spaces to a multiple of 8 bytes as the reference writer does). Duplicate names are an
// InvalidArgument.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes model.safetensors when the total fits in max_shard_bytes, otherwise
// model-0000i-of-0000N.safetensors shards plus model.safetensors.index.json (HF layout).
// Tensors are packed into shards in name order, a new shard starting when the next tensor would
// push the current one past max_shard_bytes. Stale model*.safetensors / index files in `dir` are
// removed first. Returns the files written (relative names).
std::vector<std::string> write_checkpoint(const std::string& dir, const NamedTensors& tensors,
                                          uint64_t max_shard_bytes,
                                          const std::map<std::string, std::string>& metadata = {});

// A tensor produced while writing, so large checkpoints never sit in memory at once.
// fill(dst, begin, end) writes elements [begin, end) of the row-major tensor to dst (which points
// at element `begin`). It is called from several threads for disjoint ranges, so it must be a
// pure function of (begin, end).
struct PendingTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::function<void(void* dst, int64_t begin, int64_t end)> fill;
};

// write_checkpoint for PendingTensors: data is produced in batches of a few hundred MB, filled in
// parallel on `pool` (nullptr: on the calling thread) and written with large sequential writes.
// `progress` (may be empty) is called after each batch with (bytes written, total bytes).
std::vector<std::string> write_checkpoint_streamed(
    const std::string& dir, const std::vector<PendingTensor>& tensors, uint64_t max_shard_bytes,
    const std::map<std::string, std::string>& metadata = {}, ThreadPool* pool = nullptr,
    const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace mmrt::io
