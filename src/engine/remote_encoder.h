// An encoder elsewhere (an encode worker: cluster/remote_encoder.h). With one configured, the
// media stage asks it for each item of an admitted request instead of decoding the item here.
// Its answer is the item as this process's preprocessing would describe it (dims, token count,
// kept tokens) with the encoder's output in PreparedMedia::encoded, computed from the same
// checkpoint at the same encoder precision: the step loop stores that output in the encoder
// cache instead of running the encoder. When it cannot (no encoder in reach, a failure, an
// answer that does not match the item) the stage preprocesses the item here as it would without
// one, and the step loop encodes it: the request is served either way, with the same tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/hash.h"
#include "models/model.h"

namespace mmrt::engine {

struct RemoteEncodeItem {
  models::Modality modality = models::Modality::kImage;
  std::span<const uint8_t> bytes;  // the encoded file
  models::MediaOptions options;
  Hash128 key;              // the engine's content key (tenant salt and encoder precision in it)
  std::string tenant;       // whose request (a sandboxed encoder decodes one tenant's media)
  std::string model;        // ModelSpec::encoder_identity(): the encoder must match it
  int64_t deadline_ns = 0;  // the request's first-token deadline (now_ns() clock; 0: none)
  int64_t estimated_tokens = 0;  // the header's token count (an upper bound for pruned video)
  int64_t width = 0;             // the encoder rows' width (ModelSpec::embed_dim)
  // The items a request sends at once share a group (the first one's key) and have their slot
  // in it: slot j goes to the j-th encode worker after the group's first, so they are encoded
  // side by side on different workers, and the same request finds the same workers again.
  Hash128 group;
  size_t slot = 0;
};

// What the media stage did with its remote encoder (all zero without one).
struct RemoteEncodeStats {
  int64_t encoded = 0;   // items encoded elsewhere
  int64_t declined = 0;  // not sent (no encoder in reach, or too late): encoded here
  int64_t failed = 0;    // sent, failed or answered wrongly: encoded here
};

class RemoteEncoder {
 public:
  virtual ~RemoteEncoder() = default;
  // The item preprocessed and encoded elsewhere: `encoded` is f32 [n_tokens or kept, embed_dim]
  // on the host, `features` empty, `encoder_cost` 0. std::nullopt: not sent (no encoder in reach,
  // or it would miss the deadline); an Error: it failed. Either way the stage encodes it here.
  // Called on media threads, concurrently.
  virtual std::optional<models::PreparedMedia> encode(const RemoteEncodeItem& item) = 0;
};

}  // namespace mmrt::engine
