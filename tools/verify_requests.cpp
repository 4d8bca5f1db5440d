#include "verify_requests.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "bench_workload.h"
#include "core/base64.h"
#include "core/error.h"
#include "io/file.h"
#include "verify/load.h"

namespace mmrt::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMaxFiles = 10'000;
constexpr size_t kUrlCache = 64;
constexpr uint64_t kMaxImageBytes = 32u << 20;

const char* const kWords[] = {
    "describe", "the",    "scene", "what",   "colour",  "is",      "shown",  "in",     "this",
    "picture",  "count",  "every", "object", "near",    "left",    "corner", "and",    "tell",
    "me",       "about",  "light", "shape",  "texture", "quickly", "frame",  "camera", "moving",
    "person",   "street", "sky",   "water",  "tree",    "window",  "sign",   "text",   "read"};

std::string words(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += kWords[rng() % std::size(kWords)];
  }
  return s;
}

std::vector<std::string> list_images(const std::string& dir) {
  if (!fs::is_directory(dir)) throw NotFound("images_dir '" + dir + "' is not a directory");
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
    if (ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".webp") {
      if (e.file_size() > kMaxImageBytes)
        throw InvalidArgument("images_dir file " + e.path().string() + " is larger than 32 MiB");
      out.push_back(e.path().string());
      if (out.size() > kMaxFiles)
        throw InvalidArgument("images_dir '" + dir + "' holds more than 10000 images");
    }
  }
  if (out.empty()) throw InvalidArgument("images_dir '" + dir + "' holds no .jpg/.png/.webp file");
  std::sort(out.begin(), out.end());
  return out;
}

std::string mime_of(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
  return ext == ".png" ? "image/png" : ext == ".webp" ? "image/webp" : "image/jpeg";
}

}  // namespace

VerifyRequests::VerifyRequests(const verify::Workload& w) : w_(w) {
  for (const auto& k : w.requests)
    files_.push_back(k.images.dir.empty() ? std::vector<std::string>{} : list_images(k.images.dir));
  for (const auto& s : w.streams)
    files_.push_back(s.images.dir.empty() ? std::vector<std::string>{} : list_images(s.images.dir));
}

std::vector<int64_t> VerifyRequests::image_counts() const {
  std::vector<int64_t> n;
  for (const auto& f : files_) n.push_back(static_cast<int64_t>(f.size()));
  return n;
}

std::string VerifyRequests::data_url(const verify::Planned& p) {
  size_t src = 0;
  if (p.kind == "frame") {
    for (size_t s = 0; s < w_.streams.size(); ++s)
      if (w_.streams[s].name == p.stream) src = w_.requests.size() + s;
  } else {
    src = static_cast<size_t>(p.kind_index);
  }
  const std::string key = p.image_index >= 0
                              ? std::to_string(src) + "/" + std::to_string(p.image_index)
                              : std::to_string(p.image_w) + "x" + std::to_string(p.image_h) + "/" +
                                    std::to_string(p.seed);
  if (auto it = urls_.find(key); it != urls_.end()) return it->second;
  std::string url;
  if (p.image_index >= 0) {
    const std::string& path = files_.at(src).at(static_cast<size_t>(p.image_index));
    const auto bytes = io::read_file_bytes(
        path, {.what = "workload image", .max_bytes = kMaxImageBytes, .option = nullptr});
    url = "data:" + mime_of(path) + ";base64," + base64_encode(bytes.data(), bytes.size());
  } else {
    const auto png = synthetic_png(p.image_w, p.image_h, p.seed);
    url = "data:image/png;base64," + base64_encode(png.data(), png.size());
  }
  if (urls_.size() >= kUrlCache) urls_.clear();
  return urls_[key] = url;
}

std::string VerifyRequests::body(const verify::Planned& p) {
  json content = json::array();
  const bool image = p.kind != "text";
  if (image) content.push_back({{"type", "image_url"}, {"image_url", {{"url", data_url(p)}}}});
  content.push_back({{"type", "text"},
                     {"text", words(p.prompt_words, p.seed * 31 + static_cast<uint64_t>(p.turn))}});
  json b = {{"messages", {{{"role", "user"}, {"content", content}}}},
            {"max_tokens", p.max_tokens},
            {"temperature", 0},
            {"ignore_eos", true},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
  if (!p.sla_class.empty()) b["sla_class"] = p.sla_class;
  return b.dump();
}

}  // namespace mmrt::cli
