// The wire between a worker and an encode worker (cluster/encode_worker.h), both ends' one
// definition. A request is `POST /v1/encode` with the media file as its body and headers
//   x-mmrt-modality       image | video | audio
//   x-mmrt-model          the asking worker's ModelSpec::encoder_identity(): an encode worker
//                         of another checkpoint or encoder precision answers 409
//   x-mmrt-tenant         whose media it is (a sandboxed encode worker keeps tenants apart)
//   x-mmrt-media-options  the item's MediaOptions as JSON (absent: the defaults)
// and the answer (JSON) describes the item as preprocessing made it and the region of the
// encode worker's transfer agent that holds its encoder output, f32 [rows, width] row-major
// (cluster/transfer.h). Everything read from the other side is bounded and checked.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "cluster/transfer.h"
#include "models/model.h"

namespace mmrt::cluster {

std::string to_json(const models::MediaOptions& o);
// InvalidArgument naming the field (models::validate's ranges).
models::MediaOptions parse_media_options(std::string_view json);
// "image" | "video" | "audio"; InvalidArgument otherwise.
models::Modality parse_modality(std::string_view name);

struct EncodeAnswer {
  RegionDesc region;
  models::PreparedMedia item;  // modality, dims, n_tokens, kept_tokens, slice_seconds, timings
  int64_t rows = 0, width = 0;
  double queue_ms = 0, preprocess_ms = 0, encode_ms = 0;  // on the encode worker
};

std::string to_json(const EncodeAnswer& a);
// FormatError naming the field; rows x width x 4 must equal the region's bytes, rows the item's
// tokens, and no count may exceed what a media item can have.
EncodeAnswer parse_encode_answer(std::string_view json);

}  // namespace mmrt::cluster
