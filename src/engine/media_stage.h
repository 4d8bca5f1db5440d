// The engine's work off the step loop, on threads of its own so that neither it nor the step
// loop waits for the other:
//   prepare     the chat template, tokenisation, and from each media item's header alone its
//               token count and encoder cost: the prompt is laid out (placeholders expanded,
//               positions, tenant-salted content keys) before any pixel is decoded, and
//               admission decides on exactly that;
//   preprocess  for an admitted request, decode + resize + normalise each media item (the
//               encoder's input), applied to the request by the step loop; in this process or,
//               with the media sandbox on, in a confined worker process per thread.
// Prepare work goes to its own thread, so a text request never queues behind an image decode.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/admission.h"
#include "engine/handle.h"
#include "engine/media_cost.h"
#include "engine/output_text.h"
#include "engine/remote_encoder.h"
#include "engine/request.h"
#include "io/tokenizer.h"
#include "media/image.h"
#include "models/model.h"
#include "sandbox/media_sandbox.h"

namespace mmrt::engine {

struct PendingMedia {
  models::Modality modality = models::Modality::kImage;
  std::vector<uint8_t> bytes;      // the encoded file
  models::MediaEstimate estimate;  // from the header (set by prepare)
  models::MediaOptions options;    // the request's settings for this item
  // The prompt was laid out with exactly what preprocessing will make of the item: its
  // estimate is exact, or the stage has preprocessed the same item before (a pruned video's
  // kept tokens). Only then may a cached item skip decoding. Set by prepare.
  bool layout_exact = false;
};

// What preprocessing made of a submission's media, for the step loop to apply.
struct Preprocessed {
  std::vector<models::PreparedMedia> items;  // one per index of Submission::to_preprocess
  std::vector<Hash128> files;  // their files' hashes (MediaItem::file_hash), hashed here
  int64_t done_ns = 0;
};

// A request between submit() and its end, owned by the engine.
struct Submission {
  std::unique_ptr<Request> req;
  std::shared_ptr<RequestHandle::State> handle;
  std::vector<models::ChatMessage> messages;  // until tokenised
  std::vector<int32_t> prompt_ids;            // instead of messages: ids as given
  std::string prompt_text;                    // instead of messages: raw text (no template)
  // Its media files: an item's bytes are released once it is preprocessed; a skipped item's
  // (MediaItem::features_skipped) stay, in case a cache loses it before it is encoded.
  std::vector<PendingMedia> media;
  std::vector<int32_t> unexpanded;  // the prompt before media expansion
  // The items (indices into media) the next kPreprocess run decodes: the engine's choice at
  // admission (all but those served from a cache), or those a cache lost since.
  std::vector<size_t> to_preprocess;
  Preprocessed preprocessed;  // written by the media stage, applied by apply()
  std::unique_ptr<OutputText> text;
  size_t logprobs_sent = 0;   // entries of req->output_logprobs already in events
  size_t ids_sent = 0;        // entries of req->output already in events (or resumed)
  int64_t tenant_tokens = 0;  // prompt tokens charged to its tenant's cap (the engine's books)
  bool cancel_requested = false;
};

// Newly complete text goes to the handle; so does the first token even without text of its own
// (a byte of a character, a special token): a stream's first byte leaves with it. With them go
// the log-probabilities and ids of the tokens completed since the last event.
void publish_text(Submission& s, const std::string& text);

struct MediaStageConfig {
  int media_threads = 1;           // preprocessing workers
  int64_t kv_capacity_tokens = 0;  // what the KV cache holds (a prompt + output beyond: refused)
  media::MediaContext media;       // kernel variant cap and buffers (pool: none, per item)
  // enabled: each preprocessing thread hands its items to a confined worker process instead
  // of decoding in this one (one lane per thread).
  sandbox::MediaSandboxConfig sandbox;
  // Set: admitted items are encoded elsewhere when it can (engine/remote_encoder.h), here when
  // it cannot.
  std::shared_ptr<RemoteEncoder> remote;
};

class MediaStage {
 public:
  enum class Phase { kPrepare, kPreprocess };
  struct Failure {
    Outcome outcome;  // kRefused (the request cannot be served) or kFailed (its media is bad)
    ErrorCode code;
    std::string message;
    int32_t media_item = -1;  // kFailed by its media: the item at fault (request order)
  };
  // Called on a stage thread when a submission's phase is done (failure: why it ended).
  using Done = std::function<void(Submission*, Phase, std::optional<Failure>)>;

  MediaStage(const models::ModelSpec& spec, const models::Processor& processor,
             const io::Tokenizer& tok, const MediaStageConfig& cfg, Done done);
  ~MediaStage();  // stop()
  // Stops the threads; queued work is dropped (the owner ends those requests). A Done callback
  // running meanwhile may still submit (dropped too).
  void stop();

  void submit(Submission* s, Phase phase);
  // Prepares `s`: on the calling thread when it is a text request of at most `inline_bytes` of
  // text (not worth a thread hop; the result goes to the Done callback as from a stage thread),
  // else on a prepare thread.
  void prepare(Submission* s, size_t inline_bytes);
  // On the step loop, for a submission back from kPreprocess: the encoder inputs go into the
  // request's media items (the step loop may read the request while the stage works, so the
  // stage never writes it). Where preprocessing differs from the header estimate the prompt is
  // laid out again; InvalidArgument / ResourceExhausted when it then no longer fits.
  void apply(Submission& s) const;
  // Learned media preprocessing cost (the estimate for admission).
  const MediaCostModel& media_cost() const;
  // Which media of a prepared request (about to meet admission) to decode, set in
  // s.to_preprocess with media_pending and expected_media_ns: not an item whose encoder output
  // is cached, or whose whole span is in the prefix cache (the books), where its header's
  // estimate is exact (the prompt's layout is then final); that one is marked
  // MediaItem::features_skipped. Returns how many items were skipped.
  int64_t skip_cached(Submission& s, const SchedulerView& books) const;
  // The request's skipped items are to be decoded after all (a cache lost one before it was
  // encoded): in s.to_preprocess, with media_pending and expected_media_ns. Returns their count.
  int64_t unskip(Submission& s) const;
  // The media sandbox's counters (all zero when it is off).
  sandbox::SandboxStats sandbox_stats() const;
  RemoteEncodeStats remote_stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::engine
