// safetensors: strict header validation, mmap'd zero-copy views, sharded checkpoints (the
// writer: safetensors_write.cpp). Format: 8-byte little-endian header length N, N bytes of JSON
// header, then the data section; each tensor's data_offsets are relative to the start of the data
// section.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/json_fields.h"
#include "io/safetensors_internal.h"

namespace mmrt::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;  // the reference reader's limit
using detail::kIndexName;
using detail::kSingleName;

using detail::quote;

// A read-only private mapping of a whole file.
struct MappedFile {
  std::string path;
  const uint8_t* base = nullptr;
  size_t size = 0;
  ~MappedFile() {
    if (base) ::munmap(const_cast<uint8_t*>(base), size);
  }
};

std::shared_ptr<MappedFile> map_file(const std::string& path) {
  // O_NONBLOCK: a FIFO named as a shard must not block the open; the type is checked next.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) throw NotFound(path + ": no such file");
    throw FailedPrecondition(path + ": cannot open: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw FailedPrecondition(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FormatError(path + ": not a regular file");
  }
  auto mf = std::make_shared<MappedFile>();
  mf->path = path;
  mf->size = static_cast<size_t>(st.st_size);
  if (mf->size > 0) {
    void* p = ::mmap(nullptr, mf->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw FailedPrecondition(path + ": mmap failed: " + std::strerror(err));
    }
    mf->base = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return mf;
}

struct Entry {
  TensorInfo info;
  size_t file_index = 0;
  const uint8_t* data = nullptr;  // start of the tensor's bytes in the mapping
};

struct ParsedFile {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;
};

std::string json_type(const json& j) {
  return j.type_name();
}

// Reads a non-negative integer that fits uint64 from a JSON number; nullopt otherwise.
std::optional<uint64_t> as_u64(const json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v >= 0) return static_cast<uint64_t>(v);
  }
  return std::nullopt;
}

std::string describe_number(const json& j) {
  return j.is_string() ? j.get<std::string>() : json_excerpt(j);
}

// Validates the header of one file's bytes; returns its tensors and metadata.
ParsedFile parse_file(std::span<const uint8_t> file, const std::string& F, size_t file_index) {
  if (file.size() < 8)
    throw FormatError(F + ": file is " + std::to_string(file.size()) +
                      " bytes, shorter than the 8-byte header length field");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file.data()[i];
  if (n == 0) throw FormatError(F + ": header length is 0");
  if (n > kMaxHeaderBytes)
    throw FormatError(F + ": header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > file.size() - 8)
    throw FormatError(F + ": header length " + std::to_string(n) +
                      " runs past the end of the file (" + std::to_string(file.size()) + " bytes)");
  const char* text = reinterpret_cast<const char*>(file.data() + 8);
  const uint64_t data_len = file.size() - 8 - n;
  const uint8_t* data = file.data() + 8 + n;

  // Duplicate keys are legal JSON but ambiguous here; nlohmann keeps the last, so catch them.
  std::set<std::string> seen_keys;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1) {
      std::string k = parsed.get<std::string>();
      if (!seen_keys.insert(k).second)
        throw FormatError(F + ": tensor " + quote(k) + " appears twice in the header");
    }
    return true;
  };
  check_json_depth(std::string_view(text, n), F + ": header");
  json header;
  try {
    header = json::parse(text, text + n, cb);
  } catch (const json::exception& e) {
    throw FormatError(F + ": header is not valid JSON: " + json_error_text(e));
  }
  if (!header.is_object())
    throw FormatError(F + ": header is not a JSON object (got " + json_type(header) + ")");

  ParsedFile out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object())
        throw FormatError(F + ": \"__metadata__\" must be an object of strings, got " +
                          json_type(v));
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw FormatError(F + ": \"__metadata__\" value for " + quote(m.key()) +
                            " must be a string, got " + json_type(m.value()));
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string T = F + ": tensor " + quote(name) + ": ";
    if (!v.is_object()) throw FormatError(T + "entry must be a JSON object, got " + json_type(v));
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!v.contains(key)) throw FormatError(T + "missing \"" + key + "\"");
    const json& jd = v["dtype"];
    const json& js = v["shape"];
    const json& jo = v["data_offsets"];
    if (!jd.is_string()) throw FormatError(T + "\"dtype\" must be a string, got " + json_type(jd));
    auto dt = dtype_from_name(jd.get<std::string>());
    if (!dt)
      throw FormatError(T + "unknown dtype " + quote(jd.get<std::string>()) +
                        " (supported: F32, F16, BF16, I8, U8, I32, I64)");
    if (!js.is_array()) throw FormatError(T + "\"shape\" must be an array, got " + json_type(js));
    Shape shape;
    uint64_t numel = 1;
    bool overflow = false;
    for (size_t d = 0; d < js.size(); ++d) {
      auto dim = as_u64(js[d]);
      if (!dim || *dim > static_cast<uint64_t>(INT64_MAX))
        throw FormatError(T + "dimension " + std::to_string(d) + " of \"shape\" is " +
                          describe_number(js[d]) + ", not a non-negative integer");
      shape.push_back(static_cast<int64_t>(*dim));
      overflow |= __builtin_mul_overflow(numel, *dim, &numel);
    }
    if (!jo.is_array() || jo.size() != 2)
      throw FormatError(T + "\"data_offsets\" must be an array of 2 integers, got " +
                        json_excerpt(jo));
    auto b = as_u64(jo[0]), e = as_u64(jo[1]);
    if (!b || !e)
      throw FormatError(T + "\"data_offsets\" must be non-negative integers, got " +
                        json_excerpt(jo));
    if (*b > *e)
      throw FormatError(T + "data_offsets [" + std::to_string(*b) + ", " + std::to_string(*e) +
                        "] have begin > end");
    if (*e > data_len)
      throw FormatError(T + "data_offsets end " + std::to_string(*e) +
                        " is past the end of the data section (" + std::to_string(data_len) +
                        " bytes)");
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, dtype_size(*dt), &nbytes);
    if (overflow || nbytes != *e - *b)
      throw FormatError(T + "shape " + shape_str(shape) + " x " + jd.get<std::string>() + " is " +
                        (overflow ? std::string("too large") : std::to_string(nbytes) + " bytes") +
                        " but data_offsets span " + std::to_string(*e - *b) + " bytes");
    Entry en;
    en.info = TensorInfo{name, *dt, std::move(shape), F, *b, *e};
    en.file_index = file_index;
    en.data = data + *b;
    out.entries.push_back(std::move(en));
  }

  // Overlaps: sort non-empty ranges by start; each must begin at or after the previous end.
  std::vector<const Entry*> by_off;
  for (const auto& en : out.entries)
    if (en.info.end > en.info.begin) by_off.push_back(&en);
  std::sort(by_off.begin(), by_off.end(), [](const Entry* a, const Entry* b) {
    return a->info.begin != b->info.begin ? a->info.begin < b->info.begin
                                          : a->info.end < b->info.end;
  });
  for (size_t i = 1; i < by_off.size(); ++i) {
    const TensorInfo& p = by_off[i - 1]->info;
    const TensorInfo& c = by_off[i]->info;
    if (c.begin < p.end)
      throw FormatError(F + ": tensors " + quote(p.name) + " [" + std::to_string(p.begin) + ", " +
                        std::to_string(p.end) + ") and " + quote(c.name) + " [" +
                        std::to_string(c.begin) + ", " + std::to_string(c.end) +
                        ") overlap in the data section");
  }
  return out;
}

json read_json_file(const std::string& path) {
  return parse_json(read_text_file(path), path);
}

}  // namespace

struct SafeTensors::Impl {
  std::string path;
  std::vector<std::shared_ptr<MappedFile>> files;
  std::map<std::string, Entry> entries;
  std::map<std::string, std::string> metadata;

  // Maps `file`, validates it and merges its tensors; duplicates across shards are errors.
  void add_file(const std::string& file) {
    auto mf = map_file(file);
    ParsedFile pf = parse_file({mf->base, mf->size}, mf->path, files.size());
    if (files.empty()) metadata = pf.metadata;
    files.push_back(mf);
    for (auto& en : pf.entries) {
      auto [it, fresh] = entries.emplace(en.info.name, en);
      if (!fresh)
        throw FormatError(file + ": tensor " + quote(en.info.name) + " is also in " +
                          it->second.info.file + " (duplicate tensor name across shards)");
    }
  }

  void open_index(const std::string& index_path) {
    json idx = read_json_file(index_path);
    const std::string& I = index_path;
    if (!idx.is_object()) throw FormatError(I + ": not a JSON object");
    if (!idx.contains("weight_map") || !idx["weight_map"].is_object())
      throw FormatError(I + ": missing \"weight_map\" object");
    const json& wm = idx["weight_map"];
    fs::path dir = fs::path(index_path).parent_path();
    std::map<std::string, std::string> where;  // tensor -> shard file name
    std::vector<std::string> shards;           // in order of first mention
    std::set<std::string> shard_set;
    for (auto it = wm.begin(); it != wm.end(); ++it) {
      if (!it.value().is_string())
        throw FormatError(I + ": weight_map entry for " + quote(it.key()) +
                          " must be a string, got " + json_type(it.value()));
      std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
        throw FormatError(I + ": weight_map entry for " + quote(it.key()) + " names shard " +
                          quote(shard) + ", which is not a file name in the checkpoint folder");
      where[it.key()] = shard;
      if (shard_set.insert(shard).second) shards.push_back(shard);
    }
    if (shards.empty()) throw FormatError(I + ": weight_map is empty");
    std::sort(shards.begin(), shards.end());
    for (const auto& s : shards) {
      fs::path p = dir / s;
      if (!fs::exists(p)) {
        std::string example;
        for (const auto& [t, sh] : where)
          if (sh == s) {
            example = t;
            break;
          }
        throw FormatError(I + ": shard " + quote(s) + " (holding e.g. tensor " + quote(example) +
                          ") does not exist");
      }
    }
    for (const auto& s : shards) add_file((dir / s).string());
    for (const auto& [t, sh] : where) {
      auto it = entries.find(t);
      std::string expect = (dir / sh).string();
      if (it == entries.end())
        throw FormatError(I + ": tensor " + quote(t) + " is mapped to shard " + quote(sh) +
                          " but that shard does not contain it");
      if (it->second.info.file != expect)
        throw FormatError(I + ": tensor " + quote(t) + " is mapped to shard " + quote(sh) +
                          " but that shard does not contain it (it is in " + it->second.info.file +
                          ")");
    }
    for (const auto& [t, en] : entries)
      if (!where.count(t))
        throw FormatError(en.info.file + ": tensor " + quote(t) +
                          " is not listed in the weight_map of " + I);
  }
};

std::vector<TensorInfo> parse_safetensors(std::span<const uint8_t> file,
                                          const std::string& origin) {
  std::vector<TensorInfo> out;
  for (auto& en : parse_file(file, origin, 0).entries) out.push_back(std::move(en.info));
  return out;
}

SafeTensors::SafeTensors(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafeTensors::SafeTensors(SafeTensors&&) noexcept = default;
SafeTensors& SafeTensors::operator=(SafeTensors&&) noexcept = default;
SafeTensors::~SafeTensors() = default;

SafeTensors SafeTensors::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    fs::path idx = fs::path(path) / kIndexName, single = fs::path(path) / kSingleName;
    if (fs::exists(idx))
      impl->open_index(idx.string());
    else if (fs::exists(single))
      impl->add_file(single.string());
    else
      throw NotFound(path + ": directory holds neither " + kSingleName + " nor " + kIndexName);
  } else if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    impl->open_index(path);
  } else {
    impl->add_file(path);
  }
  return SafeTensors(std::move(impl));
}

bool SafeTensors::contains(const std::string& name) const {
  return impl_->entries.count(name);
}

const TensorInfo& SafeTensors::info(const std::string& name) const {
  auto it = impl_->entries.find(name);
  if (it == impl_->entries.end()) throw NotFound(impl_->path + ": no tensor " + quote(name));
  return it->second.info;
}

Tensor SafeTensors::get(const std::string& name) const {
  auto it = impl_->entries.find(name);
  if (it == impl_->entries.end()) throw NotFound(impl_->path + ": no tensor " + quote(name));
  const Entry& en = it->second;
  void* p = const_cast<uint8_t*>(en.data);
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(en.info.dtype) != 0) {
    Tensor t = Tensor::empty(en.info.dtype, en.info.shape);
    std::memcpy(t.raw(), p, t.nbytes());
    return t;
  }
  std::shared_ptr<void> owner = impl_->files[en.file_index];
  return Tensor::view(p, en.info.dtype, en.info.shape, std::move(owner));
}

std::vector<std::string> SafeTensors::names() const {
  std::vector<std::string> out;
  out.reserve(impl_->entries.size());
  for (const auto& [k, v] : impl_->entries) out.push_back(k);
  return out;
}

size_t SafeTensors::size() const {
  return impl_->entries.size();
}

uint64_t SafeTensors::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [k, v] : impl_->entries) n += v.info.end - v.info.begin;
  return n;
}

std::vector<std::string> SafeTensors::files() const {
  std::vector<std::string> out;
  for (const auto& f : impl_->files) out.push_back(f->path);
  return out;
}

const std::map<std::string, std::string>& SafeTensors::metadata() const {
  return impl_->metadata;
}
const std::string& SafeTensors::path() const {
  return impl_->path;
}

}  // namespace mmrt::io
