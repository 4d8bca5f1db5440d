#include "server/api_media.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <string_view>
#include <utility>

#include "io/file.h"

namespace mmrt::server {
namespace {

using nlohmann::json;

std::string ticked(std::string_view s) {
  std::string out = "`";
  out += s.size() > 64 ? std::string(s.substr(0, 64)) + "..." : std::string(s);
  return out + "`";
}

// What a kind of media URL accepts: its modality, the MIME prefix of its data URLs and the
// word its messages use.
struct UrlKind {
  models::Modality modality;
  const char* mime_prefix;  // "image/"
  const char* noun;         // "image"
};
constexpr UrlKind kImageUrl{models::Modality::kImage, "image/", "image"};
constexpr UrlKind kAudioUrl{models::Modality::kAudio, "audio/", "audio"};
constexpr UrlKind kVideoUrl{models::Modality::kVideo, "video/", "video"};

void add_item(ParsedRequest& out, models::Modality m, std::vector<uint8_t> bytes,
              const std::string& pw) {
  out.request.media.push_back({m, std::move(bytes), {}});
  out.media_parts.push_back(pw);
}

// A local file under --allowed-media-dir (after `..` and symlinks are resolved), bounded.
std::vector<uint8_t> read_local(const std::string& path, const UrlKind& kind, const ApiOptions& opt,
                                const std::string& param) {
  if (opt.allowed_media_dir.empty())
    throw ApiError(403, "permission_error",
                   "local media files are not allowed (start the server with "
                   "--allowed-media-dir DIR)",
                   param);
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::path(path), ec);
  const fs::path root = fs::weakly_canonical(fs::path(opt.allowed_media_dir), ec);
  auto rel = p.lexically_relative(root);
  if (ec || rel.empty() || *rel.begin() == ".." || p.is_relative())
    throw ApiError(403, "permission_error",
                   "media file " + ticked(path) + " is outside --allowed-media-dir", param);
  try {
    return io::read_file_bytes(
        p.string(),
        {.what = kind.noun, .max_bytes = opt.max_media_bytes, .option = "--max-media-mb"});
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kResourceExhausted) throw media_too_large(e.what(), param);
    throw ApiError(e.code() == ErrorCode::kNotFound ? 404 : 400, "invalid_request_error", e.what(),
                   param);
  }
}

// One media URL: a data URL (decoded here), a local file under the allowed directory (read
// here, bounded), or an http(s) URL (returned for the caller to fetch).
void add_url(const std::string& url, const UrlKind& kind, const std::string& pw,
             const std::string& param, const ApiOptions& opt, ParsedRequest& out) {
  const std::string noun = kind.noun;
  const std::string a_noun = (noun.find_first_of("aeiou") == 0 ? "an " : "a ") + noun;
  if (url.rfind("data:", 0) == 0) {
    const size_t comma = url.find(',');
    const std::string_view head(url.data() + 5, comma == std::string::npos ? 0 : comma - 5);
    if (comma == std::string::npos || head.size() < 7 || head.substr(head.size() - 7) != ";base64")
      throw bad_request(a_noun + " data URL must be data:<type>;base64,<data>", param);
    if (head.rfind(kind.mime_prefix, 0) != 0)
      throw bad_request(a_noun + " data URL must have a " + kind.mime_prefix + "* type, not " +
                            ticked(head.substr(0, head.size() - 7)),
                        param);
    add_item(out, kind.modality,
             decode_base64(std::string_view(url).substr(comma + 1), opt.max_media_bytes, param,
                           "--max-media-mb"),
             pw);
  } else if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0) {
    out.fetches.push_back({out.request.media.size(), url, param});
    add_item(out, kind.modality, {}, pw);
  } else if (url.rfind("file://", 0) == 0) {
    // An absolute path (file:///dir/x.png, or file://localhost/dir/x.png): a relative one
    // would resolve against the server's working directory, which no client knows.
    std::string path = url.substr(7);
    if (path.rfind("localhost/", 0) == 0) path = path.substr(9);
    if (path.empty() || path[0] != '/')
      throw bad_request("a file:// URL names an absolute path (file:///dir/file), not " +
                            ticked(url.substr(0, 80)),
                        param);
    add_item(out, kind.modality, read_local(path, kind, opt, param), pw);
  } else {
    throw bad_request(
        noun + " URLs must be data:, http://, https:// or file:// URLs, not " +
            ticked(url.substr(0, url.find(':') == std::string::npos ? 16 : url.find(':'))),
        param);
  }
}

// The URL of an {"<field>": {"url": "..."}} part (or, leniently, {"<field>": "..."}).
std::string url_of(const json& part, const char* field, const std::string& param) {
  const json& u = part.contains(field) ? part[field] : json();
  if (u.is_string()) return u.get<std::string>();
  if (u.is_object() && u.contains("url") && u["url"].is_string())
    return u["url"].get<std::string>();
  throw bad_request(
      std::string("an ") + field + " part needs {\"" + field + "\": {\"url\": \"...\"}}", param);
}

}  // namespace

const char* supported_audio_formats() {
  return "wav, mp3, flac, ogg, opus";
}

void add_image_url(const json& part, const std::string& pw, const ApiOptions& opt,
                   ParsedRequest& out) {
  const std::string param = pw + ".image_url";
  add_url(url_of(part, "image_url", param), kImageUrl, pw, param, opt, out);
}

void add_audio_url(const json& part, const std::string& pw, const ApiOptions& opt,
                   ParsedRequest& out) {
  const std::string param = pw + ".audio_url";
  add_url(url_of(part, "audio_url", param), kAudioUrl, pw, param, opt, out);
}

void add_video_url(const json& part, const std::string& pw, const ApiOptions& opt,
                   ParsedRequest& out) {
  const std::string param = pw + ".video_url";
  add_url(url_of(part, "video_url", param), kVideoUrl, pw, param, opt, out);
  // mmrt's extensions (docs/video.md): {"video_url": {"url": ..., "prune_threshold": T}}, the
  // approximate temporal tier for this video, and qwen-vl-utils' per-video sampling keys.
  const json& u = part["video_url"];
  if (u.is_object()) out.request.media.back().options = parse_video_options(u, param);
}

namespace {

// The video options' keys and fields: one list for the reader, the writer and the messages.
constexpr std::pair<const char*, double models::MediaOptions::*> kVideoReals[] = {
    {"prune_threshold", &models::MediaOptions::video_prune_threshold},
    {"fps", &models::MediaOptions::video_fps}};
constexpr std::pair<const char*, int64_t models::MediaOptions::*> kVideoCounts[] = {
    {"nframes", &models::MediaOptions::video_nframes},
    {"min_frames", &models::MediaOptions::video_min_frames},
    {"max_frames", &models::MediaOptions::video_max_frames},
    {"min_pixels", &models::MediaOptions::video_min_pixels},
    {"max_pixels", &models::MediaOptions::video_max_pixels},
    {"total_pixels", &models::MediaOptions::video_total_pixels}};

}  // namespace

models::MediaOptions parse_video_options(const json& u, const std::string& param) {
  models::MediaOptions o;
  std::string last;  // the field validate() most likely blames
  for (const auto& [key, field] : kVideoReals) {
    if (!u.contains(key)) continue;
    last = param + "." + key;
    if (!u[key].is_number()) throw bad_request(std::string(key) + " must be a number", last);
    o.*field = u[key].get<double>();
  }
  if (u.contains("fps") && !(o.video_fps > 0))
    throw bad_request("fps must be positive", param + ".fps");
  for (const auto& [key, field] : kVideoCounts) {
    if (!u.contains(key)) continue;
    last = param + "." + key;
    const json& v = u[key];
    if (!v.is_number_integer() && !v.is_number_unsigned())
      throw bad_request(std::string(key) + " must be a whole number", last);
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw bad_request(std::string(key) + " is too large", last);
    o.*field = v.get<int64_t>();
    if (o.*field <= 0) throw bad_request(std::string(key) + " must be positive", last);
  }
  if (u.contains("fps") && u.contains("nframes"))
    throw bad_request("give fps or nframes, not both (as qwen-vl-utils)", param + ".nframes");
  try {
    models::validate(o);
  } catch (const Error& e) {
    // Name the field the message names.
    std::string field = last;
    auto blame = [&](const char* key) {
      if (std::string(e.what()).find(std::string("video_") + key) != std::string::npos)
        field = param + "." + key;
    };
    for (const auto& [key, f] : kVideoReals) blame(key);
    for (const auto& [key, f] : kVideoCounts) blame(key);
    throw bad_request(e.what(), field);
  }
  return o;
}

json video_options_json(const models::MediaOptions& o) {
  json j = json::object();
  for (const auto& [key, field] : kVideoReals)
    if (o.*field != 0) j[key] = o.*field;
  for (const auto& [key, field] : kVideoCounts)
    if (o.*field != 0) j[key] = o.*field;
  return j;
}

void add_input_audio(const json& part, const std::string& pw, const ApiOptions& opt,
                     ParsedRequest& out) {
  const std::string param = pw + ".input_audio";
  if (!part.contains("input_audio") || !part["input_audio"].is_object())
    throw bad_request(pw + ": an input_audio part needs {\"input_audio\": {\"data\": \"<base64>\", "
                           "\"format\": \"wav\"}}",
                      param);
  const json& ia = part["input_audio"];
  if (!ia.contains("format") || !ia["format"].is_string())
    throw bad_request(param + ".format must be a string (one of " + supported_audio_formats() + ")",
                      param + ".format");
  const std::string format = ia["format"].get<std::string>();
  static constexpr std::array<std::string_view, 5> kFormats = {"wav", "mp3", "flac", "ogg", "opus"};
  if (std::find(kFormats.begin(), kFormats.end(), format) == kFormats.end())
    throw bad_request(
        param + ".format " + ticked(format) + " is not one of " + supported_audio_formats(),
        param + ".format");
  if (!ia.contains("data") || !ia["data"].is_string())
    throw bad_request(param + ".data must be a string of base64 audio bytes", param + ".data");
  // The file's own header tells the decoder its format; `format` is the client's label for it.
  add_item(out, models::Modality::kAudio,
           decode_base64(ia["data"].get<std::string>(), opt.max_media_bytes, param + ".data",
                         "--max-media-mb"),
           pw);
}

}  // namespace mmrt::server
