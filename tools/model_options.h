// Command-line options shared by every subcommand that loads a model.
#pragma once

#include "cli.h"
#include "engine/executor.h"
#include "kernels/backend.h"
#include "models/model.h"

#define MMRT_MODEL_OPTIONS_HELP                                                               \
  "  --weights auto|f32|bf16|int8   linear-layer weight storage (default auto: as stored)\n"  \
  "  --map-weights           read bf16/f32 weights from the mapped checkpoint instead of\n"   \
  "                          copying them to huge pages (faster load, less memory, ~20%\n"    \
  "                          slower decode)\n"                                                \
  "  --int8-activations q8|float   int8 decode: x quantised per block of 64 and multiplied\n" \
  "                          as integers (q8, default; AVX512-VNNI CPUs) or strictly\n"       \
  "                          weight-only (float)\n"                                           \
  "  --kv-dtype bf16|f32     KV cache element type (default bf16)\n"                          \
  "  --kv-mb N               KV cache size in MiB (default 256)\n"                            \
  "  --threads N             compute threads (default: all CPUs; env MMRT_THREADS)\n"         \
  "  --isa NAME              highest kernel variant: portable, avx2, avx512, avx512bf16\n"    \
  "                          (default: the best this CPU has)\n"

namespace mmrt::cli {

// Reads --weights, --map-weights, --int8-activations.
models::LoadOptions load_options(Args& args);
// Reads --kv-dtype, --kv-mb.
engine::KvOptions kv_options(Args& args);
// Reads --threads: the option, else $MMRT_THREADS, else 0 (every CPU).
int thread_count_option(Args& args);
// Reads --threads (as above) and --isa.
kernels::BackendOptions backend_options(Args& args);

}  // namespace mmrt::cli
