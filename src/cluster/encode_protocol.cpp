#include "cluster/encode_protocol.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_fields.h"

namespace mmrt::cluster {

using nlohmann::json;

namespace {

constexpr int64_t kMaxRows = int64_t{1} << 22;   // tokens of one media item
constexpr int64_t kMaxWidth = int64_t{1} << 16;  // a decoder's hidden size
constexpr size_t kMaxDims = 8;
constexpr size_t kMaxAnswerValues = 4 * kMaxRows;  // kept_tokens at most rows of them

const json& field(const json& j, const char* name, const char* what) {
  auto it = j.find(name);
  if (it == j.end()) throw FormatError(std::string(what) + ": '" + name + "' is missing");
  return *it;
}

int64_t count(const json& j, const char* name, int64_t max, const char* what) {
  const json& v = field(j, name, what);
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > max)
    throw FormatError(std::string(what) + ": '" + name + "' is not a count up to " +
                      std::to_string(max));
  return v.get<int64_t>();
}

double number(const json& j, const char* name, const char* what) {
  auto it = j.find(name);
  if (it == j.end()) return 0;
  if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0)
    throw FormatError(std::string(what) + ": '" + name + "' is not a non-negative number");
  return it->get<double>();
}

}  // namespace

std::string to_json(const models::MediaOptions& o) {
  return json{{"prune_threshold", o.video_prune_threshold},
              {"fps", o.video_fps},
              {"nframes", o.video_nframes},
              {"min_frames", o.video_min_frames},
              {"max_frames", o.video_max_frames},
              {"min_pixels", o.video_min_pixels},
              {"max_pixels", o.video_max_pixels},
              {"total_pixels", o.video_total_pixels}}
      .dump();
}

models::MediaOptions parse_media_options(std::string_view text) {
  const json j = io::parse_json_or_discard(text, 64);
  if (j.is_discarded() || !j.is_object())
    throw InvalidArgument("x-mmrt-media-options is not a JSON object");
  models::MediaOptions o;
  auto real = [&](const char* name, double& dst) {
    auto it = j.find(name);
    if (it == j.end()) return;
    if (!it->is_number()) throw InvalidArgument(std::string("media options: ") + name);
    dst = it->get<double>();
  };
  auto whole = [&](const char* name, int64_t& dst) {
    auto it = j.find(name);
    if (it == j.end()) return;
    if (!it->is_number_integer()) throw InvalidArgument(std::string("media options: ") + name);
    dst = it->get<int64_t>();
  };
  real("prune_threshold", o.video_prune_threshold);
  real("fps", o.video_fps);
  whole("nframes", o.video_nframes);
  whole("min_frames", o.video_min_frames);
  whole("max_frames", o.video_max_frames);
  whole("min_pixels", o.video_min_pixels);
  whole("max_pixels", o.video_max_pixels);
  whole("total_pixels", o.video_total_pixels);
  models::validate(o);
  return o;
}

models::Modality parse_modality(std::string_view name) {
  for (models::Modality m :
       {models::Modality::kImage, models::Modality::kVideo, models::Modality::kAudio})
    if (name == models::modality_name(m)) return m;
  throw InvalidArgument("unknown modality '" + std::string(name.substr(0, 32)) + "'");
}

std::string to_json(const EncodeAnswer& a) {
  const models::PreparedMedia& p = a.item;
  return json{{"region", json::parse(to_json(a.region))},
              {"modality", models::modality_name(p.modality)},
              {"dims", p.dims},
              {"n_tokens", p.n_tokens},
              {"kept_tokens", p.kept_tokens},
              {"slice_seconds", p.slice_seconds},
              {"decode_ns", p.decode_ns},
              {"resample_ns", p.resample_ns},
              {"rows", a.rows},
              {"width", a.width},
              {"queue_ms", a.queue_ms},
              {"preprocess_ms", a.preprocess_ms},
              {"encode_ms", a.encode_ms}}
      .dump();
}

EncodeAnswer parse_encode_answer(std::string_view text) {
  constexpr const char* what = "encode answer";
  const json j = io::parse_json_or_discard(text, kMaxAnswerValues);
  if (j.is_discarded() || !j.is_object()) throw FormatError("encode answer: not a JSON object");
  EncodeAnswer a;
  a.region = parse_region_desc(field(j, "region", what).dump());
  const json& mod = field(j, "modality", what);
  if (!mod.is_string()) throw FormatError("encode answer: 'modality' is not a string");
  try {
    a.item.modality = parse_modality(mod.get<std::string>());
  } catch (const Error& e) {
    throw FormatError(std::string("encode answer: ") + e.what());
  }
  const json& dims = field(j, "dims", what);
  if (!dims.is_array() || dims.size() > kMaxDims)
    throw FormatError("encode answer: 'dims' is not a short list");
  for (const json& d : dims) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxRows)
      throw FormatError("encode answer: a dim is not a count");
    a.item.dims.push_back(d.get<int64_t>());
  }
  a.item.n_tokens = count(j, "n_tokens", kMaxRows, what);
  a.rows = count(j, "rows", kMaxRows, what);
  a.width = count(j, "width", kMaxWidth, what);
  const json& kept = field(j, "kept_tokens", what);
  if (!kept.is_array() || static_cast<int64_t>(kept.size()) > a.rows)
    throw FormatError("encode answer: 'kept_tokens' is not a list of at most 'rows' indices");
  for (const json& k : kept) {
    if (!k.is_number_integer() || k.get<int64_t>() < 0 || k.get<int64_t>() >= kMaxRows)
      throw FormatError("encode answer: a kept token is not an index");
    a.item.kept_tokens.push_back(static_cast<int32_t>(k.get<int64_t>()));
  }
  a.item.slice_seconds = number(j, "slice_seconds", what);
  a.item.decode_ns = static_cast<int64_t>(number(j, "decode_ns", what));
  a.item.resample_ns = static_cast<int64_t>(number(j, "resample_ns", what));
  a.queue_ms = number(j, "queue_ms", what);
  a.preprocess_ms = number(j, "preprocess_ms", what);
  a.encode_ms = number(j, "encode_ms", what);
  if (a.rows != a.item.n_tokens)
    throw FormatError("encode answer: " + std::to_string(a.rows) + " rows for an item of " +
                      std::to_string(a.item.n_tokens) + " tokens");
  if (a.region.bytes != static_cast<uint64_t>(a.rows * a.width) * sizeof(float))
    throw FormatError("encode answer: a region of " + std::to_string(a.region.bytes) +
                      " bytes for " + std::to_string(a.rows) + " x " + std::to_string(a.width) +
                      " floats");
  return a;
}

}  // namespace mmrt::cluster
