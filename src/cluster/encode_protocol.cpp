#include "cluster/encode_protocol.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "cluster/wire_fields.h"
#include "core/error.h"
#include "io/json_fields.h"
#include "server/api.h"
#include "server/api_media.h"

namespace mmrt::cluster {

using nlohmann::json;

namespace {

constexpr int64_t kMaxRows = int64_t{1} << 22;   // tokens of one media item
constexpr int64_t kMaxWidth = int64_t{1} << 16;  // a decoder's hidden size
constexpr size_t kMaxDims = 8;
constexpr size_t kMaxAnswerValues = 4 * kMaxRows;  // kept_tokens at most rows of them
constexpr double kMaxReal = std::numeric_limits<double>::max();

}  // namespace

// The options travel as a video_url part writes them: the API's reader checks them.
std::string to_json(const models::MediaOptions& o) {
  return server::video_options_json(o).dump();
}

models::MediaOptions parse_media_options(std::string_view text) {
  const json j = io::parse_json_or_discard(text, 64);
  if (j.is_discarded() || !j.is_object())
    throw InvalidArgument("x-mmrt-media-options is not a JSON object");
  try {
    return server::parse_video_options(j, "x-mmrt-media-options");
  } catch (const server::ApiError& e) {
    throw InvalidArgument(e.what());
  }
}

models::Modality parse_modality(std::string_view name) {
  for (models::Modality m :
       {models::Modality::kImage, models::Modality::kVideo, models::Modality::kAudio})
    if (name == models::modality_name(m)) return m;
  throw InvalidArgument("unknown modality '" + std::string(name.substr(0, 32)) + "'");
}

std::string to_json(const EncodeAnswer& a) {
  const models::PreparedMedia& p = a.item;
  return json{{"region", region_json(a.region)},
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
  const json j = WireFields::parse(text, kMaxAnswerValues, "encode answer");
  const WireFields f(j, "encode answer");
  EncodeAnswer a;
  a.region = region_from_json(f.get("region"));
  try {
    a.item.modality = parse_modality(f.text("modality"));
  } catch (const InvalidArgument& e) {
    f.fail(e.what());
  }
  const json& dims = f.get("dims");
  if (!dims.is_array() || dims.size() > kMaxDims) f.fail("'dims' is not a short list");
  for (const json& d : dims) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxRows)
      f.fail("a dim is not a count");
    a.item.dims.push_back(d.get<int64_t>());
  }
  a.item.n_tokens = f.count("n_tokens", kMaxRows);
  a.rows = f.count("rows", kMaxRows);
  a.width = f.count("width", kMaxWidth);
  const json& kept = f.get("kept_tokens");
  if (!kept.is_array() || static_cast<int64_t>(kept.size()) > a.rows)
    f.fail("'kept_tokens' is not a list of at most 'rows' indices");
  for (const json& k : kept) {
    if (!k.is_number_integer() || k.get<int64_t>() < 0 || k.get<int64_t>() >= kMaxRows)
      f.fail("a kept token is not an index");
    a.item.kept_tokens.push_back(static_cast<int32_t>(k.get<int64_t>()));
  }
  a.item.slice_seconds = f.number_or("slice_seconds", 0, 0, kMaxReal);
  a.item.decode_ns = static_cast<int64_t>(f.number_or("decode_ns", 0, 0, kMaxReal));
  a.item.resample_ns = static_cast<int64_t>(f.number_or("resample_ns", 0, 0, kMaxReal));
  a.queue_ms = f.number_or("queue_ms", 0, 0, kMaxReal);
  a.preprocess_ms = f.number_or("preprocess_ms", 0, 0, kMaxReal);
  a.encode_ms = f.number_or("encode_ms", 0, 0, kMaxReal);
  if (a.rows != a.item.n_tokens)
    f.fail(std::to_string(a.rows) + " rows for an item of " + std::to_string(a.item.n_tokens) +
           " tokens");
  if (a.region.bytes != static_cast<uint64_t>(a.rows * a.width) * sizeof(float))
    f.fail("a region of " + std::to_string(a.region.bytes) + " bytes for " +
           std::to_string(a.rows) + " x " + std::to_string(a.width) + " floats");
  return a;
}

}  // namespace mmrt::cluster
