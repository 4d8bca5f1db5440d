// Command-line options shared by every subcommand that loads a model.
#pragma once

#include "cli.h"
#include "engine/engine.h"
#include "engine/executor.h"
#include "io/file.h"
#include "kernels/backend.h"
#include "media/host_context.h"
#include "models/model.h"
#include "sandbox/media_sandbox.h"

#define MMRT_MODEL_OPTIONS_HELP                                                                \
  "  --device cpu|cuda[:N]   where the model computes (default cpu); `mmrt devices` lists\n"   \
  "                          the backends of this build and the devices present\n"             \
  "  --weights auto|f32|bf16|int8|fp8   linear-layer weight storage (default auto: as\n"       \
  "                          stored); fp8: E4M3 with a scale per output channel, CUDA\n"       \
  "                          devices only\n"                                                   \
  "  --map-weights           read bf16/f32 weights from the mapped checkpoint instead of\n"    \
  "                          copying them to huge pages (faster load, less memory, ~20%\n"     \
  "                          slower decode)\n"                                                 \
  "  --int8-activations q8|float   int8 decode: x quantised per block of 64 and multiplied\n"  \
  "                          as integers (q8, default; AVX512-VNNI CPUs) or strictly\n"        \
  "                          weight-only (float)\n"                                            \
  "  --int8-prefill bf16|q8  int8 prefill (prompt chunks): weight-only against bf16(x)\n"      \
  "                          (bf16, default), or x quantised per token and multiplied as\n"    \
  "                          integers on AVX512-VNNI (q8: ~1.7x the GEMM rate; coarser\n"      \
  "                          than decode's blocks of 64: check your checkpoint's logits)\n"    \
  "  --encoder-weights auto|bf16|int8   the media encoders' blocks: int8 weights (per\n"       \
  "                          output channel) and int8 activations (per token) on\n"            \
  "                          AVX512-VNNI, or bf16; auto (default): int8 where the CPU\n"       \
  "                          has VNNI and the model is not f32. The patch embedding, the\n"    \
  "                          projector and the last --encoder-keep-last blocks stay bf16;\n"   \
  "                          without AMX an int8 block's attention scores are int8 too\n"      \
  "  --encoder-keep-last N   encoder blocks at the end kept in bf16 (default 3)\n"             \
  "  --kv-dtype bf16|f32     KV cache element type (default bf16)\n"                           \
  "  --kv-mb N               KV cache size in MiB (default 256 on the CPU; on a GPU the\n"     \
  "                          cache is sized by --gpu-memory-fraction unless this is given)\n"  \
  "  --gpu-memory-fraction F   a GPU's KV cache: what keeps the device's memory in use,\n"     \
  "                          weights included, at or under F of its total (0.05..1,\n"         \
  "                          default 0.9; the rest is the activations' and encoders' room)\n"  \
  "  --step-graphs N         a GPU's decode steps of 1..N sequences run as CUDA graphs,\n"     \
  "                          captured at load (default 64; 0: every step launched op by\n"     \
  "                          op). A step with a context over 8192 tokens runs eagerly\n"       \
  "  --threads N             compute threads, at most 4 per CPU (default 0: all CPUs;\n"       \
  "                          env MMRT_THREADS)\n"                                              \
  "  --isa NAME              highest CPU kernel variant (compute on the CPU, media\n"          \
  "                          everywhere): portable, avx2, avx512, avx512bf16 (default: the\n"  \
  "                          best this CPU has)\n"                                             \
  "  --batch-invariant       every sequence's logits and KV the same bits alone or batched,\n" \
  "                          cached or cold, prefilled or decoded (the CPU's matrix-vector\n"  \
  "                          kernels for every linear, no split-kv attention): greedy and\n"   \
  "                          seeded output repeat exactly, and a stream resumed on another\n"  \
  "                          worker goes on as the first would have. Prefill costs more\n"     \
  "                          (docs/kernels-gemm.md, \"Batch invariance\")\n"                   \
  "  --long-audio split|refuse   audio longer than the model's window (Qwen2-Audio: 30 s):\n"  \
  "                          split (default) encodes it as consecutive 30 s windows of one\n"  \
  "                          item, each as the HF processor encodes a clip that long;\n"       \
  "                          refuse rejects it with both durations. (The HF processor\n"       \
  "                          silently cuts it at 30 s.)\n"

#define MMRT_SANDBOX_OPTIONS_HELP                                                              \
  "  --media-sandbox on|off  decode media in confined worker processes (seccomp allow-list,\n" \
  "                          memory and CPU limits, one tenant per worker; default on)\n"      \
  "  --media-memory-mb N     heap a media worker may use (16..65536, default 1024)\n"          \
  "  --media-cpu-seconds N   CPU time per media item in the sandbox (1..3600, default 10)\n"   \
  "  --media-timeout S       wall time per media item in the sandbox (0.1..3600 s, default\n"  \
  "                          30)\n"

namespace mmrt::cli {

// Reads --weights, --map-weights, --int8-activations, --int8-prefill, --long-audio.
models::LoadOptions load_options(Args& args);
// Reads --long-audio split|refuse (default split).
models::LoadOptions::LongAudio long_audio_option(Args& args);
// Reads --kv-dtype, --kv-mb, --gpu-memory-fraction.
engine::KvOptions kv_options(Args& args);
// Reads --max-image-bytes (default 64 MiB): the limit for reading an image file.
io::FileLimit image_file_limit(Args& args);
// Reads --max-audio-bytes (default 64 MiB): the limit for reading an audio file.
io::FileLimit audio_file_limit(Args& args);
// --max-video-bytes N (default 256 MiB).
io::FileLimit video_file_limit(Args& args);
// Reads --max-source-pixels: the largest decoded image (default 50 Mpixel, at most 2^31).
int64_t max_source_pixels_option(Args& args);
// Reads --step-tokens (tokens per engine step, 16..65536, default 512).
int32_t step_tokens_option(Args& args);
// The most compute threads --threads / MMRT_THREADS may ask for: 4 per CPU, at least 64.
int max_threads();
// Reads --threads: the option, else $MMRT_THREADS, else 0 (every CPU).
int thread_count_option(Args& args);
// Reads --media-sandbox (default on), --media-memory-mb, --media-cpu-seconds and
// --media-timeout for the checkpoint in `model_dir`.
sandbox::MediaSandboxConfig media_sandbox_options(Args& args, const std::string& model_dir);
// Where and how a command computes: the device, the backend's settings, the host context's.
struct ComputeOptions {
  Device device;
  kernels::BackendOptions backend;
  media::HostOptions host;
  int32_t step_graph_rows = 64;  // --step-graphs
};
// Reads --device, --threads (as above), --isa (the CPU backend's and the media kernels' cap) and
// --step-graphs.
ComputeOptions compute_options(Args& args);
// The backend of `o.device` (FailedPrecondition naming the backends and devices there are).
std::unique_ptr<kernels::Backend> make_backend(const ComputeOptions& o);
// Sets an engine's device, backend and host settings from them.
void set_compute(engine::EngineConfig& cfg, const ComputeOptions& o);

// One --policy value: a policy name, optionally with ":plain" (no admission control and no batch
// controller: what an engine without SLA classes does, admit everything at a fixed budget) or,
// for slo, ":reserve" (EngineConfig::admission_reserve), set on `cfg`. InvalidArgument naming
// `value` for another modifier or an unknown policy.
void apply_policy_option(const std::string& value, engine::EngineConfig& cfg);

}  // namespace mmrt::cli
