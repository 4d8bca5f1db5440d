#include "models/checkpoint.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "io/json_fields.h"

namespace mmrt::models {

namespace {

// "N what (first: a, b, c)" or "" when the list is empty.
std::string summarize(const std::vector<std::string>& items, const char* what) {
  if (items.empty()) return "";
  constexpr size_t kShow = 5;
  std::string s = std::to_string(items.size()) + " " + what + " (";
  for (size_t i = 0; i < items.size() && i < kShow; ++i) {
    if (i) s += ", ";
    s += items[i];
  }
  if (items.size() > kShow) s += ", ...";
  return s + ")";
}

}  // namespace

void check_checkpoint_tensors(const io::SafeTensors& st,
                              const std::vector<ExpectedTensor>& expected,
                              const std::string& what) {
  std::vector<std::string> missing, unexpected, wrong_shape, bad_dtype;
  std::set<std::string> expected_names;
  for (const ExpectedTensor& e : expected) {
    expected_names.insert(e.name);
    if (!st.contains(e.name)) {
      missing.push_back(e.name);
      continue;
    }
    const io::TensorInfo& info = st.info(e.name);
    if (info.shape != e.shape)
      wrong_shape.push_back(e.name + " is " + shape_str(info.shape) + ", expected " +
                            shape_str(e.shape));
    if (info.dtype != DType::kF32 && info.dtype != DType::kF16 && info.dtype != DType::kBF16)
      bad_dtype.push_back(e.name + " is " + std::string(dtype_name(info.dtype)));
  }
  for (const auto& n : st.names())
    if (!expected_names.count(n)) unexpected.push_back(n);
  if (missing.empty() && unexpected.empty() && wrong_shape.empty() && bad_dtype.empty()) return;
  std::string msg = st.path() + ": checkpoint does not match its config.json (" + what + "):";
  for (const std::string& part :
       {summarize(missing, "missing"), summarize(unexpected, "unexpected"),
        summarize(wrong_shape, "with the wrong shape"),
        summarize(bad_dtype, "with an unsupported dtype (need F32, F16 or BF16)")})
    if (!part.empty()) msg += " " + part + ";";
  msg.pop_back();
  throw FormatError(msg);
}

std::string inspect_text(const char* fmt, ...) {
  char buf[320];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

io::Tokenizer load_tokenizer(const std::string& dir) {
  const std::filesystem::path p = std::filesystem::path(dir) / "tokenizer.json";
  std::error_code ec;
  if (!std::filesystem::exists(p, ec))
    throw NotFound("model folder '" + dir + "' has no tokenizer.json (a checkpoint needs one)");
  return io::Tokenizer::from_file(p.string());
}

void check_tokenizer(const io::Tokenizer& tok, int64_t vocab_size, const std::string& dir) {
  if (tok.vocab_size() > vocab_size)
    throw FormatError((std::filesystem::path(dir) / "tokenizer.json").string() +
                      " has token ids up to " + std::to_string(tok.vocab_size() - 1) +
                      " but config.json's vocab_size is " + std::to_string(vocab_size) +
                      ": ids from " + std::to_string(vocab_size) + " on have no embedding row");
}

std::optional<CheckpointFile> read_preprocessor_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "preprocessor_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  return CheckpointFile{path, io::read_text_file(path)};
}

Hash128 weights_fingerprint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  Hasher h;
  constexpr uint64_t kSamples = 16, kSample = 4096;
  std::vector<char> buf(kSample);
  for (const fs::path& f : files) {
    const uint64_t size = fs::file_size(f, ec);
    h.update(f.filename().string()).update_pod(size);
    std::ifstream in(f, std::ios::binary);
    for (uint64_t i = 0; in && size > 0 && i < kSamples; ++i) {
      const uint64_t at = size > kSample ? (size - kSample) / (kSamples - 1) * i : 0;
      in.seekg(static_cast<std::streamoff>(at));
      in.read(buf.data(), static_cast<std::streamsize>(std::min(kSample, size)));
      h.update(buf.data(), static_cast<size_t>(in.gcount()));
    }
  }
  return h.digest();
}

}  // namespace mmrt::models
