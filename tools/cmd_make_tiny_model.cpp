// mmrt make-tiny-model: writes a random checkpoint folder of a registered family in the exact
// Hugging Face layout.
#include <cstdio>

#include "cli.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model_options.h"
#include "models/registry.h"
#include "models/tiny_registry.h"

namespace {

using namespace mmrt;

std::string family_names() {
  std::string s;
  for (const models::ModelFamily* f : models::families())
    s += (s.empty() ? "" : ", ") + std::string(f->name);
  return s;
}

int run(cli::Args& args) {
  models::TinyModelOptions o;
  const std::string arch = args.get_or("arch", "qwen2-vl");
  const std::string out = args.require("out");
  o.size = args.get_or("size", "tiny");
  const int64_t seed = args.get_int("seed", 0, 0, INT64_MAX);
  o.seed = static_cast<uint64_t>(seed);
  o.dtype = args.get_choice<DType>("dtype", "bf16", {{"bf16", DType::kBF16}, {"f32", DType::kF32}});
  o.tokenizer_path = args.get_or("tokenizer", "");
  o.naming = args.get_or("naming", "");
  const bool tie = args.flag("tie"), untie = args.flag("untie");
  if (tie && untie) throw InvalidArgument("--tie and --untie are mutually exclusive");
  if (tie) o.tied = true;
  if (untie) o.tied = false;
  const int64_t shard_mb = args.get_int("max-shard-mb", 2000, 1, 1'000'000);
  o.max_shard_bytes = static_cast<uint64_t>(shard_mb) * 1000 * 1000;
  const int threads = cli::thread_count_option(args);
  args.finish();
  if (!args.positional().empty())
    throw InvalidArgument("unexpected argument '" + args.positional()[0] + "'");
  const models::ModelFamily* family = nullptr;
  for (const models::ModelFamily* f : models::families())
    if (arch == f->name) family = f;
  if (!family)
    throw InvalidArgument("--arch '" + arch + "' is not supported (available: " + family_names() +
                          ")");
  bool size_ok = false;
  std::string sizes;
  for (const auto& s : family->tiny_sizes) {
    size_ok = size_ok || s == o.size;
    sizes += (sizes.empty() ? "" : ", ") + s;
  }
  if (!size_ok)
    throw InvalidArgument("--size '" + o.size + "' is not a " + arch + " preset (" + sizes + ")");
  o.progress = true;
  ThreadPool pool(threads > 0 ? threads : cpu_count());  // fills tensors in parallel
  o.pool = &pool;

  const models::TinyModelResult r = models::make_tiny_model(*family, out, o);
  std::printf("wrote %s (%s)\n", out.c_str(), r.summary.c_str());
  std::printf("  files       ");
  for (size_t i = 0; i < r.files.size(); ++i)
    std::printf("%s%s", i ? ", " : "", r.files[i].c_str());
  std::printf("\n  tensors     %zu\n", r.n_tensors);
  std::printf("  parameters  %lld (%.3f M)\n", static_cast<long long>(r.n_params),
              r.n_params / 1e6);
  std::printf("  bytes       %llu (%.1f MB)\n", static_cast<unsigned long long>(r.n_bytes),
              r.n_bytes / 1e6);
  std::printf("  tokenizer   %d tokens, config vocab_size %lld\n", r.tokenizer_size,
              static_cast<long long>(r.vocab_size));
  std::printf("  time        %.2f s\n", r.seconds);
  return 0;
}

}  // namespace

MMRT_COMMAND("make-tiny-model",
             "write a random checkpoint (HF layout) of a model family for tests/benchmarks",
             R"(usage: mmrt make-tiny-model --out DIR [options]

Writes a complete random checkpoint folder with the exact Hugging Face names and layout:
config.json, model.safetensors (or model-0000i-of-0000N.safetensors shards + index.json when a
shard would exceed --max-shard-mb), tokenizer.json, tokenizer_config.json,
generation_config.json and preprocessor_config.json.

options:
  --arch NAME              model family: qwen2-vl (default), qwen2-audio, llava-next, llava,
                           fuyu
  --out DIR                output folder (created; old weight files in it are replaced)
  --size PRESET            the family's presets, the first the default:
                           qwen2-vl: tiny (hidden 64, 2 layers, vision embed 32; a few MB, unit
                           tests), small (hidden 768, 12 layers, vision 4 x 384; ~90M params,
                           benchmarks), 2b-shape (Qwen2-VL-2B's exact dimensions: 2.21B params,
                           4.4 GB bf16);
                           qwen2-audio: tiny, hf-tester (the HF test model's sizes), small,
                           tower-7b-shape;
                           llava-next, llava: tiny, 7b-shape-4l (the 7B's every per-layer shape,
                           vocabulary and CLIP ViT-L/14-336, 4 of its 32 decoder layers);
                           fuyu: tiny, 8b-shape-4l (Fuyu-8B's shapes and 262,144-token
                           vocabulary, 4 of its 36 layers: 2.9B params, 5.9 GB bf16)
  --seed N                 random seed (default 0); same seed, same weights
  --dtype bf16|f32         weight dtype (default bf16)
  --tokenizer PATH         copy this tokenizer.json in and take the special-token ids from it
                           (default: learn one in the family's layout from built-in text:
                           byte-level BPE for Qwen, SentencePiece-style BPE for LLaVA, Unigram
                           for Fuyu)
  --naming old|new         tensor names: old = the original checkpoints' (qwen2-vl: model.*,
                           visual.*; llava, fuyu: language_model.model.*), new = transformers
                           v4.52+'s (model.language_model.*, ...) (default old)
  --tie | --untie          tie lm_head to embed_tokens or not (default: the preset's choice)
  --max-shard-mb N         shard size limit in MB (default 2000, HF's "2GB")
  --threads N              threads filling the tensors (default: all CPUs; env MMRT_THREADS)

Weights: norm weights 1, norm biases 0, everything else ~N(0, 0.02), reproducible per seed.
)",
             {"tie", "untie"}, &run);
