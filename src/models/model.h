// The seam between the engine and a model family. The engine sees only these plain types:
//   ModelSpec  what to schedule: vocabulary, stop ids, KV geometry, position rows, context
//              length, the modalities the model takes;
//   Processor  the request side: chat template, media estimates (from headers, before any
//              decoding), preprocessing, placeholder expansion and position ids, content keys;
//   Runner     the compute side: encode a media item, run one decoder step over a batch whose
//              K/V live in memory the caller (the executor) owns.
// A family (one folder under src/models/) implements them and registers in registry.cpp; the
// engine reaches it only through models::load_model (registry.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/hash.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/kv_cache.h"
#include "kernels/linear.h"

namespace mmrt {
class ThreadPool;
namespace io {
class Tokenizer;
}
namespace media {
struct MediaContext;
}
}  // namespace mmrt

namespace mmrt::models {

enum class Modality : uint8_t { kImage, kVideo, kAudio };
const char* modality_name(Modality m);  // "image", "video", "audio"

// ---- chat -------------------------------------------------------------------------------------

struct ContentPart {
  enum class Kind { kText, kImage, kVideo, kAudio };
  Kind kind = Kind::kText;
  std::string text;  // for kText
  // kVideo: this item continues the video part right before it in the same message (the next
  // segment of a streamed clip): prompted as one video whose slices are both items' in order.
  bool continues = false;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool"
  std::vector<ContentPart> content;
  static ChatMessage text(std::string role, std::string text);
};

// The modality of a media content part; InvalidArgument for kText.
Modality modality_of(ContentPart::Kind kind);

// ---- spec ---------------------------------------------------------------------------------------

struct KvLayerShape {
  int32_t n_kv_heads = 0, head_dim = 0;
};

struct ModelSpec {
  std::string family;        // registry name, e.g. "qwen2-vl"
  std::string architecture;  // config.json architectures[0]
  int64_t vocab_size = 0;    // rows of the logits (the checkpoint's, possibly padded, vocabulary)
  std::vector<int32_t> stop_ids;        // end-of-turn ids: config.json and generation_config.json
  std::vector<KvLayerShape> kv_layers;  // one per decoder layer
  int32_t position_rows = 1;            // rows of SeqStep::positions: 1 (1-D RoPE) or 3 (M-RoPE)
  int64_t context_length = 0;  // positions the model was trained for (max_position_embeddings)
  std::vector<Modality> modalities;  // media the model takes (empty: text only)
  int64_t embed_dim = 0;  // width of the rows media encoders produce (the decoder's hidden)
  Hash128 config_key;     // hash of config.json: part of every media content key
  Hash128 weights_key;    // models/checkpoint.h's weights_fingerprint (set by load_model)
  // How the media encoders compute (EncoderPrecision::describe, e.g. "bf16"): part of every
  // media item's key in the engine, so an int8 and a bf16 encoding never share a cache entry.
  std::string encoder_precision;
  int64_t encoder_blocks = 0;  // transformer blocks of the media encoder (0: none)

  bool takes(Modality m) const;
  // config.json's hash, the weights' fingerprint and the encoder precision: two processes whose
  // identities are equal compute the same encoder output from the same media file (an encode
  // worker checks it).
  std::string encoder_identity() const;
};

// ---- processor --------------------------------------------------------------------------------

// What a media item will be, known from its header alone (no decoding): admission decides on
// it before any expensive work, and the prompt is expanded with it (expand() takes a
// PreparedMedia without features built from it). Preprocessing must agree with it; where it
// cannot be exact the engine re-expands with what preprocessing produced.
struct MediaEstimate {
  std::vector<int64_t> dims;  // as PreparedMedia::dims
  int64_t n_tokens = 0;       // placeholder tokens in the prompt
  int64_t encoder_cost = 0;   // encoder work, in the scheduler's units (vision patches)
  int64_t source_pixels = 0;  // pixels to decode (preprocessing cost)
  int64_t feature_bytes = 0;  // bytes of PreparedMedia::features (0: not known from the header)
  // Preprocessing will produce exactly these dims, token count, cost and feature bytes (an
  // image's header tells all; a video's or an audio file's may not).
  bool exact = false;
  double slice_seconds = 0;  // as PreparedMedia::slice_seconds (a sampled video's)
};

// Per-item settings a request may choose (plain data, part of the item's content key).
struct MediaOptions {
  // Video, the approximate temporal tier (0: off, the default). A merged token whose pixels
  // differ from the last kept token at the same spatial position by less than this mean
  // absolute difference, in 8-bit levels (0-255), is dropped before the LLM prefill; the kept
  // tokens keep their original positions. Families without it ignore it.
  double video_prune_threshold = 0;
  // Video sampling, qwen-vl-utils' per-message keys (0: the model's setting): frames sampled
  // per second, or a fixed frame count instead (not both); the frame count's bounds; the pixel
  // budgets per frame (max_pixels can only lower the one derived from total_pixels) and for the
  // whole clip.
  double video_fps = 0;
  int64_t video_nframes = 0, video_min_frames = 0, video_max_frames = 0;
  int64_t video_min_pixels = 0, video_max_pixels = 0, video_total_pixels = 0;
  bool operator==(const MediaOptions&) const = default;
  // Any video sampling setting given.
  bool samples_video() const;
};
// InvalidArgument naming the field when a value is out of range (threshold: finite, 0-255;
// fps: [0.001, 1000]; frame counts: up to 100000; pixels: up to 1e9, total up to 1e12; fps and
// nframes together). The family may refuse more: Qwen2-VL lets a request lower its video
// budgets, not raise them.
void validate(const MediaOptions& o);

// A preprocessed media item: modality-neutral to the engine, family-specific inside.
struct PreparedMedia {
  Modality modality = Modality::kImage;
  Tensor features;            // the encoder's input (Qwen2-VL: pixel_values [patches, 1176] f32)
  std::vector<int64_t> dims;  // the family's description of `features` (Qwen2-VL: grid t, h, w)
  int64_t n_tokens = 0;       // placeholder tokens it expands to
  int64_t encoder_cost = 0;   // as in MediaEstimate
  // Token pruning (MediaOptions): the indices, strictly increasing, of the tokens kept among
  // the item's full token grid (n_tokens of them); empty: none pruned.
  std::vector<int32_t> kept_tokens;
  // Where preprocess() spent its time (0: not measured): decoding the file (to pixels; audio:
  // to samples at the file's rate) and resampling (audio). The rest of its time went to
  // preprocessing proper (resize and normalise, the log-mel).
  int64_t decode_ns = 0, resample_ns = 0;
  // A sampled video: the seconds one temporal patch of frames spans (Qwen2.5-VL's
  // second_per_grid_t: temporal_patch_size / the sampling fps); 0 otherwise.
  double slice_seconds = 0;
  // The encoder's output when it was computed elsewhere (an encode worker, engine/
  // remote_encoder.h): f32 [n_tokens, embed_dim] on the host, `features` then empty. The engine
  // stores it as it would the output of encode().
  Tensor encoded;
  bool encoded_elsewhere() const { return encoded.rank() > 0; }
};

struct MediaSpan {
  int64_t begin = 0;     // first prompt index of the item's placeholder run
  int64_t n_tokens = 0;  // length of the run
};

// A prompt with every media placeholder expanded.
struct ExpandedPrompt {
  std::vector<int32_t> ids;        // [S]
  std::vector<int32_t> positions;  // [position_rows, S], or empty: position = index
  int32_t rope_delta = 0;          // later tokens: position = cache index + rope_delta
  std::vector<MediaSpan> spans;    // one per media item, in prompt order
};

// An item laid out from its header's estimate (modality, dims, token count, encoder cost, slice
// length; no features): what Processor::expand needs to place it before it is decoded.
PreparedMedia layout_shell(Modality m, const MediaEstimate& e);

// A media item's content key from its bytes, the processor's settings hash and the modality:
// what Processor::content_key is for a family whose MediaOptions change nothing.
Hash128 media_content_key(std::span<const uint8_t> bytes, const Hash128& settings, Modality m);

// The 1-D placeholder expansion of the families without M-RoPE: each `placeholder` id in `ids`
// becomes the token run `run` appends for the next media item (in order; `run` also checks the
// item), recorded as that item's span; positions stay plain (position = index). InvalidArgument
// when placeholders and items disagree in number, naming `placeholder_name` and `items_name`
// ("<image>", "images").
ExpandedPrompt expand_placeholders_1d(
    std::span<const int32_t> ids, int32_t placeholder, std::span<const PreparedMedia> media,
    const std::string& placeholder_name, const std::string& items_name,
    const std::function<void(const PreparedMedia& item, std::vector<int32_t>& out)>& run);

class Processor {
 public:
  virtual ~Processor() = default;
  // The chat template, one placeholder per media part (expand() sizes them).
  virtual std::string render_chat(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt = true) const = 0;
  // The chat's prompt ids, placeholders unexpanded: `tok`'s ids of render_chat() unless the
  // family's processor tokenises its parts apart (Fuyu: the image grids, BOS, then the text).
  virtual std::vector<int32_t> chat_ids(const io::Tokenizer& tok,
                                        const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt = true) const;
  // Header-only estimate of an encoded media file; throws the decoder's errors for a bad header.
  // With options that prune tokens it is an upper bound (exact = false).
  virtual MediaEstimate estimate(Modality m, std::span<const uint8_t> bytes,
                                 const MediaOptions& opts) const = 0;
  // Decodes and preprocesses one media file for the encoder (runs on a media worker).
  virtual PreparedMedia preprocess(Modality m, std::span<const uint8_t> bytes,
                                   const media::MediaContext& ctx,
                                   const MediaOptions& opts) const = 0;
  // Expands the placeholders of tokenised `ids` (one per item, as render_chat wrote them) and
  // computes position ids from the items' dims and token counts (their features are not read).
  // InvalidArgument when placeholders and items disagree.
  virtual ExpandedPrompt expand(std::span<const int32_t> ids,
                                std::span<const PreparedMedia> media) const = 0;
  // Content key of an item: its bytes, the model's config, the preprocessing settings and the
  // item's options (the engine mixes in the tenant's salt).
  virtual Hash128 content_key(Modality m, std::span<const uint8_t> bytes,
                              const MediaOptions& opts) const = 0;

  // The same with the default options.
  MediaEstimate estimate(Modality m, std::span<const uint8_t> bytes) const {
    return estimate(m, bytes, MediaOptions{});
  }
  PreparedMedia preprocess(Modality m, std::span<const uint8_t> bytes,
                           const media::MediaContext& ctx) const {
    return preprocess(m, bytes, ctx, MediaOptions{});
  }
  Hash128 content_key(Modality m, std::span<const uint8_t> bytes) const {
    return content_key(m, bytes, MediaOptions{});
  }
};

// ---- runner -----------------------------------------------------------------------------------

// One sequence's part of a decoder step: its new tokens (a prefill chunk or one decode token).
struct SeqStep {
  std::span<const int32_t> tokens;  // [n]
  // Positions [position_rows, n] (row-major); empty: kv_before + i + rope_delta on every row.
  std::span<const int32_t> positions;
  int32_t rope_delta = 0;
  int32_t kv_before = 0;                 // tokens of this sequence already in the cache
  std::span<const int32_t> block_table;  // physical blocks covering kv_before + n tokens
  // Media embeddings replacing the token embeddings of some rows: rows are indices into
  // `tokens`, embeds is [embed_rows.size(), embed_dim] f32.
  std::span<const int32_t> embed_rows;
  const float* embeds = nullptr;
  bool want_logits = true;  // logits of this sequence's last new token
};

// One item's encode in parts that run in order, so that a step can run some of it: the engine
// spreads a large item's encoder over steps that keep the decoding requests on their TPOT
// schedules. The parts' outputs equal encode()'s, bit for bit.
class EncodeJob {
 public:
  virtual ~EncodeJob() = default;
  virtual int64_t parts() const = 0;
  virtual int64_t done() const = 0;
  virtual void run(int64_t n) = 0;  // the next n parts (InternalError past the last)
  // After the last part: [item.n_tokens, embed_dim] f32, as encode() returns it.
  virtual Tensor result() = 0;
  // The parts not run yet, then the result.
  Tensor run_rest() {
    run(parts() - done());
    return result();
  }

 protected:
  // InternalError unless n (>= 0) parts are left to run; unless every part has run.
  void check_run(int64_t n) const;
  void check_finished() const;
};

class Runner {
 public:
  virtual ~Runner() = default;
  // Encoder output of one item: [item.n_tokens, embed_dim] f32.
  virtual Tensor encode(const PreparedMedia& item) = 0;
  // How many parts encode_job(item) runs in (1, the default: the whole encode at once). Never
  // throws: an item the encoder refuses counts as one part (the executor runs a one-part item
  // through encode(), which says why).
  virtual int64_t encode_parts(const PreparedMedia& item) const {
    (void)item;
    return 1;
  }
  // `item`'s encode in encode_parts(item) parts; the default runs encode() as its one part.
  // `item` must outlive the job. InvalidArgument for an item the encoder refuses.
  virtual std::unique_ptr<EncodeJob> encode_job(const PreparedMedia& item);
  // One decoder step; K/V are read and written in `kv` (laid out as kv_config() describes).
  // Returns logits [n_want, vocab] f32 (valid until the next call). InvalidArgument for
  // inconsistent inputs.
  virtual Tensor forward(std::span<const SeqStep> batch, kernels::KvCache& kv) = 0;
  // The KV cache this model needs, num_blocks and dtype left to the caller.
  virtual kernels::KvCacheConfig kv_config() const = 0;
  virtual kernels::WeightFormat weight_format() const = 0;
  virtual size_t weight_bytes() const = 0;  // decoder bytes streamed per decode step
  // Floating-point operations of encode() (for GFLOP/s reports; 0 when unknown).
  virtual double encode_flops(const PreparedMedia& item) const { return 0; }
  // Debug aid: copy the decoder's hidden states ([layers + 1, n_tokens, hidden]) on forward().
  virtual void capture_hidden_states(Tensor* out) { (void)out; }
};

// ---- loading ----------------------------------------------------------------------------------

struct LoadOptions {
  // Linear-layer weights: unset = as stored (f32 stays f32, bf16/f16 become bf16); kInt8
  // quantises per output channel at load time.
  std::optional<kernels::WeightFormat> weight_format;
  // kCopy: own huge-page memory (fastest decode); kViewIfPossible: read from the mapping.
  kernels::WeightPlacement weight_placement = kernels::WeightPlacement::kCopy;
  kernels::Int8Activations int8_activations = kernels::Int8Activations::kQ8;
  // The language model's int8 prefill (the GEMM path): weight-only against bf16(x) (kBF16), or x
  // quantised per token and multiplied as integers on AVX512-VNNI (kQ8Row, ~1.7x the GEMM rate;
  // kernels/linear.h). Decode is unaffected (int8_activations).
  kernels::Int8Gemm int8_prefill = kernels::Int8Gemm::kBF16;
  // The media encoders' linear layers (models/encoder_block.h, EncoderPrecision): "auto" (int8
  // blocks where the backend multiplies int8 by int8 and the model is not f32, else 16-bit),
  // "bf16" or "int8"; the last `encoder_keep_last` blocks, the patch embedding and the
  // projector stay 16-bit.
  std::string encoder_weights = "auto";
  int64_t encoder_keep_last = 3;
  int64_t encoder_int8_block = -1;  // diagnostics: >= 0, this block alone in int8
  // Audio longer than the model's window (Qwen2-Audio: 30 s): kSplit encodes it as consecutive
  // windows of one item, each exactly as the HF processor encodes a clip of that length; kRefuse
  // refuses it (InvalidArgument naming both durations). Never the HF processor's silent cut.
  enum class LongAudio : uint8_t { kSplit, kRefuse };
  LongAudio long_audio = LongAudio::kSplit;
  // Video, the exact temporal tier: a slice of frames whose encoder input is bit-identical to an
  // earlier slice of the same item reuses that slice's encoder output (families whose encoder
  // sees each slice alone). Off: every slice is encoded (the same output, for benchmarks).
  bool video_slice_reuse = true;
  // Load the media encoders only (an encode worker, cluster/encode_worker.h): the language
  // model's layers and head are not read (its embedding table stays mapped); Runner::forward
  // then throws FailedPrecondition.
  bool encoders_only = false;
};

// A loaded checkpoint. The runner computes on the Backend given to load_model, which must
// outlive it.
struct Model {
  ModelSpec spec;
  std::unique_ptr<Processor> processor;
  std::unique_ptr<Runner> runner;
};

// make-tiny-model: a random checkpoint in the family's exact Hugging Face layout.
struct TinyModelOptions {
  std::string size = "tiny";  // the family's presets (Qwen2-VL: tiny, small, 2b-shape)
  uint64_t seed = 0;
  DType dtype = DType::kBF16;  // kBF16 or kF32
  std::string tokenizer_path;  // a tokenizer.json to copy in; empty: train one
  std::string naming;          // tensor-name convention ("" = the family's default)
  std::optional<bool> tied;    // lm_head tied to the embeddings (unset: the preset's choice)
  uint64_t max_shard_bytes = 2'000'000'000;
  ThreadPool* pool = nullptr;  // fills tensors in parallel (nullptr: serially)
  bool progress = false;       // progress lines on stderr
};

struct TinyModelResult {
  std::string summary;             // one line: family, size, dtype, naming, tying
  std::vector<std::string> files;  // every file written, relative to the output folder
  size_t n_tensors = 0;
  int64_t n_params = 0;
  uint64_t n_bytes = 0;        // tensor data bytes
  int32_t tokenizer_size = 0;  // max token id + 1
  int64_t vocab_size = 0;      // config.json vocab_size
  double seconds = 0;
};

// What `mmrt inspect` shows of a checkpoint beyond its files: (label, value) lines.
using InspectLines = std::vector<std::pair<std::string, std::string>>;
struct Inspection {
  InspectLines lines;
  int64_t vocab_size = 0;  // embedding rows: every tokenizer id must be below it
};

// The ops of several components, in order, each once.
std::vector<kernels::Op> ops_of(std::initializer_list<std::span<const kernels::Op>> parts);

struct ModelFamily {
  const char* name;                        // "qwen2-vl": make-tiny-model --arch, ModelSpec::family
  std::vector<std::string> architectures;  // config.json "architectures" it serves
  std::vector<std::string> model_types;  // config.json "model_type" (when architectures is absent)
  std::vector<std::string> tiny_sizes;   // make-tiny-model --size presets, the default first
  // Reads config.json, checks every tensor against it (before any compute), loads the weights.
  // Call it through load_model (models/registry.h), which first checks `ops` on the backend.
  Model (*load)(const kernels::Backend& be, const std::string& dir, const LoadOptions& opts);
  // Every op its runner may call: a backend lacking any of them is refused before loading.
  std::vector<kernels::Op> ops;
  // The same checks as load() without loading the weights; the family-specific lines.
  Inspection (*inspect)(const std::string& dir);
  // The request side alone (config.json and the preprocessing settings, no weights): what a
  // media worker process needs to preprocess as the loaded model would.
  std::unique_ptr<Processor> (*load_processor)(const std::string& dir);
};

}  // namespace mmrt::models
