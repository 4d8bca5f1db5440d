// The safetensors writer: whole checkpoints from tensors in memory, and streamed ones whose data
// is produced batch by batch (make-tiny-model's multi-GB checkpoints), sharded as Hugging Face
// shards them, headers laid out exactly as the reference writer does.
#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "io/safetensors_internal.h"

namespace mmrt::io {

namespace fs = std::filesystem;
using detail::kIndexName;
using detail::kSingleName;
using detail::quote;
using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Writing

namespace {

// "model-00001-of-00003.safetensors": a shard's name (model-\d{5}-of-\d{5}\.safetensors).
bool is_shard_name(std::string_view n) {
  auto digits = [&](size_t at) {
    return std::all_of(n.begin() + static_cast<std::ptrdiff_t>(at),
                       n.begin() + static_cast<std::ptrdiff_t>(at + 5),
                       [](char c) { return c >= '0' && c <= '9'; });
  };
  return n.size() == 32 && n.starts_with("model-") && digits(6) && n.substr(11, 4) == "-of-" &&
         digits(15) && n.substr(20) == ".safetensors";
}

// Unbuffered POSIX file with a large write() loop; errors name the file.
class OutFile {
 public:
  explicit OutFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw FailedPrecondition(path_ + ": cannot create: " + std::strerror(errno));
  }
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd_, c, std::min<size_t>(n, size_t{1} << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        if (err == ENOSPC) throw ResourceExhausted(path_ + ": write failed: disk full");
        throw FailedPrecondition(path_ + ": write failed: " + std::strerror(err));
      }
      c += w;
      n -= static_cast<size_t>(w);
    }
  }
  void close() {
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      throw FailedPrecondition(path_ + ": close failed: " + std::strerror(errno));
  }

 private:
  std::string path_;
  int fd_ = -1;
};

uint64_t pending_bytes(const PendingTensor& t) {
  return static_cast<uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
}

// Header JSON exactly as the reference writer lays it out (compact, "__metadata__" first), with
// tensors in the given order and consecutive data offsets, padded with spaces to a multiple of 8.
std::string make_header(const std::vector<const PendingTensor*>& ts,
                        const std::map<std::string, std::string>& metadata) {
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":" + json(metadata).dump();
    first = false;
  }
  uint64_t off = 0;
  for (const PendingTensor* t : ts) {
    uint64_t n = pending_bytes(*t);
    if (!first) h += ',';
    first = false;
    h += json(t->name).dump();
    h += ":{\"dtype\":\"" + std::string(dtype_name(t->dtype)) + "\",\"shape\":[";
    for (size_t d = 0; d < t->shape.size(); ++d) {
      if (d) h += ',';
      h += std::to_string(t->shape[d]);
    }
    h += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + n) + "]}";
    off += n;
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

// Writes one shard: header, then the data produced batch by batch. Filling batch k+1 overlaps
// writing batch k (two buffers).
void write_one_file(const std::string& path, const std::vector<const PendingTensor*>& ts,
                    const std::map<std::string, std::string>& metadata, ThreadPool& pool,
                    uint64_t& done, uint64_t total,
                    const std::function<void(uint64_t, uint64_t)>& progress) {
  OutFile out(path);
  std::string header = make_header(ts, metadata);
  uint8_t len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  out.write(len, 8);
  out.write(header.data(), header.size());

  uint64_t shard_bytes = 0;
  for (const auto* t : ts) shard_bytes += pending_bytes(*t);
  const uint64_t kBatch = std::min<uint64_t>(std::max<uint64_t>(shard_bytes, 1), 128ull << 20);
  std::shared_ptr<void> bufs[2] = {aligned_alloc_shared(kBatch), aligned_alloc_shared(kBatch)};

  struct Piece {
    const PendingTensor* t;
    int64_t begin, end;  // elements
    uint64_t off;        // byte offset in the batch buffer
  };
  std::future<void> writing;
  int cur = 0;
  size_t ti = 0;
  int64_t te = 0;  // next element of ts[ti]
  while (ti < ts.size()) {
    // Gather the pieces of this batch; elements are split into work items of <= 1 MiB.
    std::vector<Piece> pieces;
    uint64_t used = 0;
    while (ti < ts.size() && used < kBatch) {
      const PendingTensor* t = ts[ti];
      const int64_t numel = shape_numel(t->shape);
      const size_t es = dtype_size(t->dtype);
      const int64_t item = std::max<int64_t>(1, static_cast<int64_t>((1u << 20) / es));
      while (te < numel && used + es <= kBatch) {
        int64_t room = static_cast<int64_t>((kBatch - used) / es);
        int64_t e = std::min({numel, te + item, te + room});
        pieces.push_back({t, te, e, used});
        used += static_cast<uint64_t>(e - te) * es;
        te = e;
      }
      if (te >= numel) {
        ++ti;
        te = 0;
      } else {
        break;  // batch full
      }
    }
    uint8_t* buf = static_cast<uint8_t*>(bufs[cur].get());
    pool.parallel_for(static_cast<int64_t>(pieces.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const Piece& p = pieces[i];
        p.t->fill(buf + p.off, p.begin, p.end);
      }
    });
    if (writing.valid()) writing.get();
    writing = std::async(std::launch::async, [&out, buf, used, &done, total, &progress] {
      out.write(buf, used);
      done += used;
      if (progress) progress(done, total);
    });
    cur ^= 1;
  }
  if (writing.valid()) writing.get();
  out.close();
}

void check_names(const std::vector<PendingTensor>& tensors) {
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__" || t.name.empty())
      throw InvalidArgument("safetensors writer: invalid tensor name " + quote(t.name));
    if (!seen.insert(t.name).second)
      throw InvalidArgument("safetensors writer: duplicate tensor name " + quote(t.name));
    for (int64_t d : t.shape)
      if (d < 0)
        throw InvalidArgument("safetensors writer: tensor " + quote(t.name) +
                              " has a negative dimension in " + shape_str(t.shape));
  }
}

std::vector<PendingTensor> to_pending(const NamedTensors& tensors, std::vector<Tensor>& keep) {
  std::vector<PendingTensor> out;
  keep.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    keep.push_back(t.contiguous());
    const uint8_t* src = static_cast<const uint8_t*>(keep.back().raw());
    size_t es = dtype_size(t.dtype());
    out.push_back({name, t.dtype(), t.shape(), [src, es](void* dst, int64_t b, int64_t e) {
                     std::memcpy(dst, src + b * es, static_cast<size_t>(e - b) * es);
                   }});
  }
  return out;
}

std::vector<const PendingTensor*> sorted_ptrs(const std::vector<PendingTensor>& tensors) {
  std::vector<const PendingTensor*> ps;
  for (const auto& t : tensors) ps.push_back(&t);
  std::sort(ps.begin(), ps.end(),
            [](const PendingTensor* a, const PendingTensor* b) { return a->name < b->name; });
  return ps;
}

}  // namespace

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> keep;
  std::vector<PendingTensor> pending = to_pending(tensors, keep);
  check_names(pending);
  uint64_t done = 0, total = 0;
  for (const auto& t : pending) total += pending_bytes(t);
  ThreadPool serial(1);
  write_one_file(path, sorted_ptrs(pending), metadata, serial, done, total, {});
}

std::vector<std::string> write_checkpoint(const std::string& dir, const NamedTensors& tensors,
                                          uint64_t max_shard_bytes,
                                          const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> keep;
  std::vector<PendingTensor> pending = to_pending(tensors, keep);
  ThreadPool serial(1);
  return write_checkpoint_streamed(dir, pending, max_shard_bytes, metadata, &serial);
}

std::vector<std::string> write_checkpoint_streamed(
    const std::string& dir, const std::vector<PendingTensor>& tensors, uint64_t max_shard_bytes,
    const std::map<std::string, std::string>& metadata, ThreadPool* pool,
    const std::function<void(uint64_t, uint64_t)>& progress) {
  check_names(tensors);
  if (max_shard_bytes == 0) throw InvalidArgument("write_checkpoint: max_shard_bytes is 0");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir))
    throw FailedPrecondition(dir + ": cannot create directory: " + ec.message());
  // Remove files a previous checkpoint left that open() would otherwise pick up.
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n == kSingleName || n == kIndexName || is_shard_name(n)) fs::remove(e.path());
  }

  std::vector<const PendingTensor*> ps = sorted_ptrs(tensors);
  std::vector<std::vector<const PendingTensor*>> shards(1);
  uint64_t cur = 0, total = 0;
  for (const PendingTensor* t : ps) {
    uint64_t n = pending_bytes(*t);
    if (!shards.back().empty() && cur + n > max_shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(t);
    cur += n;
    total += n;
  }
  ThreadPool serial(1);  // without a pool the calling thread fills every batch
  ThreadPool& tp = pool ? *pool : serial;
  uint64_t done = 0;
  std::vector<std::string> written;
  if (shards.size() == 1) {
    write_one_file((fs::path(dir) / kSingleName).string(), shards[0], metadata, tp, done, total,
                   progress);
    written.push_back(kSingleName);
    return written;
  }
  json weight_map = json::object();
  char name[64];
  for (size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    write_one_file((fs::path(dir) / name).string(), shards[i], metadata, tp, done, total, progress);
    for (const PendingTensor* t : shards[i]) weight_map[t->name] = name;
    written.push_back(name);
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::string text = index.dump(2) + "\n";
  OutFile f((fs::path(dir) / kIndexName).string());
  f.write(text.data(), text.size());
  f.close();
  written.push_back(kIndexName);
  return written;
}

}  // namespace mmrt::io
