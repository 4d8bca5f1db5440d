// A request's state inside the engine: its prompt (tokens, position rows, media spans), its
// sampling settings, where scheduling has got to, and its timeline. Owned by the engine's step
// loop; the scheduler, the cache managers and admission read and update it. Modality-neutral:
// a media item is a span of placeholder tokens with a content key and an encoder cost.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "engine/sampler.h"
#include "engine/sla.h"
#include "engine/step.h"
#include "engine/timeline.h"
#include "models/model.h"

namespace mmrt::engine {

// RequestId: engine/step.h

// How a request ended. Exactly one per request.
enum class Outcome : uint8_t { kNone, kFinished, kStopped, kCancelled, kRefused, kFailed };
const char* outcome_name(Outcome o);

struct GenerateRequest;
struct Request;
// The request's clock: its origin (arrival_ns) is the caller's arrival stamp when that is a time
// no later than `now`, else `now`; its timeline gets kArrived, kRequestRead (when `read_ns` lies
// between arrival and now) and kReceived (now).
void start_clock(Request& r, int64_t arrival_ns, int64_t read_ns, int64_t now);
// The request's promise (after start_clock): its class's weight, deadline (from arrival) and
// TPOT target, or the explicit ones of `g`. InvalidArgument for an unknown class or a negative
// deadline or target.
void apply_promise(Request& r, const GenerateRequest& g,
                   const SlaConfig& sla);  // "finished" (length), "stopped", "cancelled", ...

// One media item of a request, placed in the prompt.
struct MediaItem {
  models::Modality modality = models::Modality::kImage;
  Hash128 key;        // content key (bytes, model, processor settings) + tenant salt
  Hash128 file_hash;  // the file's bytes alone (EncoderCache's listener; set once preprocessed)
  models::PreparedMedia prepared;  // the encoder's input (features released once encoded)
  int64_t begin = 0;               // first prompt index of its placeholder run
  int64_t n_tokens = 0;            // length of the run
  int64_t encoder_cost = 0;        // encoder work in the scheduler's units (vision patches)
  int64_t encode_parts = 1;        // parts its encoder runs in (models::Runner::encode_parts)
  // Admission found its encoder output, or its whole span, in a cache, so it was not decoded:
  // `prepared` is the header's (exact) estimate, without features. Should the cache lose it
  // before the scheduler needs the encoder, the request goes back to the media stage.
  bool features_skipped = false;
};

enum class RequestStatus : uint8_t { kWaiting, kRunning, kPreempted, kDone };

struct Request {
  RequestId id = 0;
  std::string tenant;
  int64_t tenant_max_prompt_tokens = 0;  // its tenant's cap in flight (0: the engine's)
  bool over_tenant_cap = false;          // refused for that cap
  Hash128 tenant_salt;                   // mixed into every cache key of this request
  std::vector<int32_t> prompt;
  std::vector<int32_t> positions;  // [position_rows, prompt.size()] or empty (text positions)
  int32_t rope_delta = 0;
  std::vector<MediaItem> media;  // in prompt order, non-overlapping
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;
  int64_t max_total_tokens = 0;  // context length: prompt + output never exceed it (0: none)
  int32_t priority = 0;          // larger = more important (priority policy)
  int64_t arrival_ns = 0;        // for fcfs and deadlines
  int64_t deadline_ns = 0;       // absolute time-to-first-token deadline (0: none)
  // The deadline was the request's own (GenerateRequest::ttft_deadline_ns): a miss is refused,
  // whatever its class's rule (the client asked for that time, not for a lower class).
  bool own_deadline = false;
  int64_t tpot_target_ns = 0;  // per-output-token target (0: none)
  // The TPOT target was the request's own (GenerateRequest::tpot_target_ns): a miss of it is
  // refused, and a downgrade for its first token keeps it.
  bool own_tpot = false;
  std::string sla_class;          // "" when none (best effort)
  double weight = 1.0;            // the class weight (slo policy)
  int64_t predicted_ttft_ns = 0;  // admission's prediction (0: none made)
  int64_t model_ttft_ns = 0;      // ... before the per-class bias correction
  // Refused by admission: when a retry could be admitted (the predicted excess over its class:
  // the queue ahead must drain that much), or -1 when never on this server (its own work alone
  // is predicted over the class's budget).
  int64_t retry_after_ns = 0;
  // Admission runs before the media is decoded: prompt, positions and media spans are then
  // laid out from the media headers (exact for images), the encoder inputs are still missing.
  bool media_pending = false;    // its media's features are still being preprocessed
  double expected_media_ns = 0;  // decode + preprocessing time of its media (while pending)
  // Of the media stage's time (kReceived/kScheduled .. kMediaDecoded): decoding the files and
  // resampling audio, summed over its items (the rest is preprocessing).
  int64_t media_decode_ns = 0, media_resample_ns = 0;
  int32_t failed_media = -1;  // failed by its media: the item at fault (request order), or -1

  // Scheduling state.
  RequestStatus status = RequestStatus::kWaiting;
  int64_t num_computed = 0;     // tokens whose K/V is in the cache
  int64_t num_cached_hit = 0;   // of those, tokens taken from the prefix cache at admission
  std::vector<int32_t> output;  // generated tokens (stop token excluded)
  // Of `output`, the first tokens came with the request (a stream resumed here after its worker
  // failed, GenerateRequest::resume_ids): prefilled with the prompt, counted in max_tokens and
  // the draw index, never emitted again. Its first token here is output[resumed].
  int64_t resumed = 0;
  std::vector<TokenLogprobs> output_logprobs;  // one per output token when sampling.logprobs >= 0
  int32_t num_preemptions = 0;
  Outcome outcome = Outcome::kNone;
  std::string reason;                      // for refused / failed
  ErrorCode error = ErrorCode::kInternal;  // for refused / failed: what the caller should do
  Timeline timeline;

  int64_t num_tokens() const { return static_cast<int64_t>(prompt.size() + output.size()); }
  int32_t token_at(int64_t i) const {
    return i < static_cast<int64_t>(prompt.size()) ? prompt[static_cast<size_t>(i)]
                                                   : output[static_cast<size_t>(i) - prompt.size()];
  }
  // Position of token i on row c (prompt rows from `positions`, the rest index + delta).
  int32_t position_at(int c, int64_t i) const {
    const int64_t S = static_cast<int64_t>(prompt.size());
    if (i < S && !positions.empty()) return positions[static_cast<size_t>(c * S + i)];
    return static_cast<int32_t>(i + rope_delta);
  }
  bool finished() const { return status == RequestStatus::kDone; }
  // Tokens generated here (not resumed).
  int64_t generated() const { return static_cast<int64_t>(output.size()) - resumed; }
  // Tokens to prefill before the first decode: the prompt and the resumed output.
  int64_t prefill_tokens() const { return static_cast<int64_t>(prompt.size()) + resumed; }
  // The whole prompt (and resumed output) is in the KV cache: each step now decodes one token.
  bool prefilled() const { return num_computed >= prefill_tokens(); }
  // Makes `ids` the output already delivered (a resumed stream). InvalidArgument for an id
  // outside [0, vocab) or when they leave nothing to generate within max_tokens.
  void resume(std::vector<int32_t> ids, int64_t vocab);
};

}  // namespace mmrt::engine
