// The contract between the scheduler and the executor, both ways, as plain data: a StepPlan says
// what one step computes (the tokens and positions of each chunk, its block table, the encoder
// rows it reads, the encoder jobs to run, the encoder entries to free, what to sample), a
// StepOutput what came of it (sampled ids, log-probabilities, encoder timings, step time).
// Nothing here names a device, a thread pool or memory: the executor owns the memory (KV cache,
// encoder outputs) on whatever backend it computes with, and a fake executor (tests) can run the
// same plan. scripts/check_source_rules.py keeps host-only types out of this header.
#pragma once

#include <cstdint>
#include <vector>

#include "core/hash.h"
#include "engine/sampler.h"
#include "models/model.h"

namespace mmrt::engine {

using RequestId = uint64_t;

// Encoder rows that replace token embeddings in a chunk.
struct ChunkMedia {
  Hash128 key;            // the encoder output (in the executor's store, or made this step)
  int64_t item_row = 0;   // first row within the item's output
  int64_t chunk_row = 0;  // first row within the chunk
  int64_t n = 0;
};

// How to draw the token that follows a chunk.
struct SampleSpec {
  SamplerSettings settings;
  uint64_t draw = 0;                    // the request's output length so far
  std::vector<int32_t> prompt, output;  // only when the settings have penalties
  int32_t logprobs = -1;                // SamplingParams::logprobs
};

struct ScheduledChunk {
  RequestId id = 0;
  int64_t start = 0;            // first token index computed this step (the request's num_computed)
  int64_t n = 0;                // tokens computed this step
  bool sample = false;          // the chunk reaches the request's last token: sample the next one
  bool prefill = false;         // it computes prompt tokens
  std::vector<int32_t> tokens;  // [n]
  std::vector<int32_t> positions;  // [position_rows, n], or empty: start + i + rope_delta
  int32_t rope_delta = 0;
  std::vector<int32_t> block_table;  // physical blocks covering start + n tokens
  std::vector<ChunkMedia> media;
  SampleSpec sampling;  // when sample
};

// Encoder work on one item this step: all of it, or some of its parts (models::EncodeJob) when
// the step's time allows no more; the item's output exists once its last part has run.
struct EncoderJob {
  RequestId owner = 0;  // the request whose prefill needs it (timeline attribution)
  size_t media = 0;     // index into that request's media
  Hash128 key;
  models::PreparedMedia input;  // shares the request's features (no copy)
  bool keep = true;  // the cache reserved room: store the output; else use it for this step only
  int64_t part_begin = 0, part_end = 1, parts = 1;  // parts [begin, end) of the item's `parts`
  bool first() const { return part_begin == 0; }
  bool last() const { return part_end == parts; }
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<EncoderJob> encoder_jobs;
  std::vector<Hash128> encoder_frees;  // evicted entries: the executor frees them first
  std::vector<Hash128> encoder_drops;  // items encoded in parts that nobody needs any longer
  std::vector<RequestId> preempted;
  // Requests that reached a media item whose features were skipped and whose encoder output is
  // no longer cached: they have no chunk in the plan; the engine withdraws them for decoding.
  std::vector<RequestId> need_media;
  int64_t num_tokens = 0, num_decode_tokens = 0, num_prefill_tokens = 0;
  int64_t encoder_patches = 0;
  // Nothing to run: no chunk and no encoder work (a step may only advance an encode in parts).
  bool empty() const { return chunks.empty() && encoder_jobs.empty(); }
};

struct EncoderTiming {
  int64_t start_ns = 0, end_ns = 0;
};

struct StepOutput {
  std::vector<int32_t> sampled;         // one per chunk with sample = true, in plan order
  std::vector<TokenLogprobs> logprobs;  // parallel to sampled where a chunk asked (else empty)
  std::vector<EncoderTiming> encoder;   // one per encoder job (its parts this step), in plan order
  int64_t step_ns = 0;
};

}  // namespace mmrt::engine
