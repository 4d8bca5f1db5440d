// A request's state inside the engine: its prompt (tokens, M-RoPE positions, media spans), its
// sampling settings, where scheduling has got to, and its timeline. Owned by the engine's step
// loop; the scheduler, the cache managers and the executor read and update it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/hash.h"
#include "core/tensor.h"
#include "engine/sampler.h"
#include "engine/timeline.h"
#include "models/qwen2_vl/vision_tower.h"

namespace mmrt::engine {

using RequestId = uint64_t;

// How a request ended. Exactly one per request.
enum class Outcome : uint8_t { kNone, kFinished, kStopped, kCancelled, kRefused, kFailed };
const char* outcome_name(Outcome o);  // "finished" (length), "stopped", "cancelled", ...

// One image of a request, preprocessed, placed in the prompt.
struct MediaItem {
  Hash128 key;          // content hash of the bytes + model + processor settings + tenant salt
  Tensor pixel_values;  // [n_patches, patch_dim] f32 (released once encoded)
  models::GridThw grid{};
  int64_t begin = 0;     // first prompt index of its <|image_pad|> run
  int64_t n_tokens = 0;  // length of the run
  int64_t n_patches() const { return grid[0] * grid[1] * grid[2]; }
};

enum class RequestStatus : uint8_t { kWaiting, kRunning, kPreempted, kDone };

struct Request {
  RequestId id = 0;
  std::string tenant;
  Hash128 tenant_salt;  // mixed into every cache key of this request
  std::vector<int32_t> prompt;
  std::vector<int32_t> positions;  // [3, prompt.size()] or empty (text)
  int32_t rope_delta = 0;
  std::vector<MediaItem> media;  // in prompt order, non-overlapping
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;
  int32_t priority = 0;           // larger = more important (priority policy)
  int64_t arrival_ns = 0;         // for fcfs and deadlines
  int64_t deadline_ns = 0;        // absolute time-to-first-token deadline (0: none)
  int64_t tpot_target_ns = 0;     // per-output-token target (0: none)
  std::string sla_class;          // "" when none
  double weight = 1.0;            // the class weight (slo policy)
  int64_t predicted_ttft_ns = 0;  // admission's prediction (0: none made)
  int64_t model_ttft_ns = 0;      // ... before the per-class bias correction

  // Scheduling state.
  RequestStatus status = RequestStatus::kWaiting;
  int64_t num_computed = 0;     // tokens whose K/V is in the cache
  int64_t num_cached_hit = 0;   // of those, tokens taken from the prefix cache at admission
  std::vector<int32_t> output;  // generated tokens (stop token excluded)
  int32_t num_preemptions = 0;
  std::unique_ptr<Sampler> sampler;
  Outcome outcome = Outcome::kNone;
  std::string reason;  // for refused / failed
  Timeline timeline;

  int64_t num_tokens() const { return static_cast<int64_t>(prompt.size() + output.size()); }
  int32_t token_at(int64_t i) const {
    return i < static_cast<int64_t>(prompt.size()) ? prompt[static_cast<size_t>(i)]
                                                   : output[static_cast<size_t>(i) - prompt.size()];
  }
  // M-RoPE position of token i on row c (prompt rows from `positions`, the rest index + delta).
  int32_t position_at(int c, int64_t i) const {
    const int64_t S = static_cast<int64_t>(prompt.size());
    if (i < S && !positions.empty()) return positions[static_cast<size_t>(c * S + i)];
    return static_cast<int32_t>(i + rope_delta);
  }
  bool finished() const { return status == RequestStatus::kDone; }
  // The whole prompt is in the KV cache: each step now decodes one token.
  bool prefilled() const { return num_computed >= static_cast<int64_t>(prompt.size()); }
};

}  // namespace mmrt::engine
