// mmrt inspect: opens and validates a checkpoint folder and prints what it holds.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli.h"
#include "core/error.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "models/qwen2_vl/weights_spec.h"

namespace {

using namespace mmrt;
namespace fs = std::filesystem;

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(v[i]);
  }
  return "[" + s + "]";
}

int run(cli::Args& args) {
  args.finish();
  if (args.positional().size() != 1)
    throw InvalidArgument("expected exactly one checkpoint folder (see mmrt inspect --help)");
  const std::string dir = args.positional()[0];
  if (!fs::is_directory(dir)) throw NotFound(dir + ": not a directory");

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  io::Qwen2VLConfig cfg = io::load_qwen2_vl_config((fs::path(dir) / "config.json").string());
  cfg.validate((fs::path(dir) / "config.json").string());
  io::SafeTensors st = io::SafeTensors::open(dir);
  models::check_qwen2_vl_checkpoint(st, cfg);
  const double load_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();

  const io::Qwen2VLNaming naming = io::detect_qwen2_vl_naming(st.names(), dir);
  const bool tied = !st.contains("lm_head.weight");
  int64_t params = 0;
  std::map<std::string, uint64_t> bytes_by_dtype;
  std::map<std::string, size_t> count_by_dtype;
  for (const auto& n : st.names()) {
    const io::TensorInfo& info = st.info(n);
    params += shape_numel(info.shape);
    bytes_by_dtype[std::string(dtype_name(info.dtype))] += info.end - info.begin;
    count_by_dtype[std::string(dtype_name(info.dtype))] += 1;
  }
  const auto& t = cfg.text;
  const auto& v = cfg.vision;
  std::printf("checkpoint    %s\n", dir.c_str());
  std::printf("architecture  %s (model_type %s, torch_dtype %s)\n", cfg.architecture.c_str(),
              cfg.model_type.c_str(), cfg.torch_dtype.c_str());
  std::printf(
      "text          hidden %lld, layers %lld, heads %lld (head_dim %lld), kv heads %lld, "
      "intermediate %lld, vocab %lld, mrope %s, rope_theta %g, rms_norm_eps %g\n",
      (long long)t.hidden_size, (long long)t.num_hidden_layers, (long long)t.num_attention_heads,
      (long long)t.head_dim(), (long long)t.num_key_value_heads, (long long)t.intermediate_size,
      (long long)t.vocab_size, join(t.mrope_section).c_str(), t.rope_theta, t.rms_norm_eps);
  std::printf(
      "vision        depth %lld, embed %lld, heads %lld (head_dim %lld), mlp %lld, patch %lld, "
      "temporal %lld, merge %lld, out %lld\n",
      (long long)v.depth, (long long)v.embed_dim, (long long)v.num_heads, (long long)v.head_dim(),
      (long long)v.mlp_hidden(), (long long)v.patch_size, (long long)v.temporal_patch_size,
      (long long)v.spatial_merge_size, (long long)v.hidden_size);
  std::printf(
      "tokens        bos %lld, eos %lld, vision_start %lld, vision_end %lld, image %lld, "
      "video %lld\n",
      (long long)cfg.bos_token_id, (long long)cfg.eos_token_id,
      (long long)cfg.vision_start_token_id, (long long)cfg.vision_end_token_id,
      (long long)cfg.image_token_id, (long long)cfg.video_token_id);
  std::printf("naming        %s\n", naming == io::Qwen2VLNaming::kOld
                                        ? "old (model.*, visual.*)"
                                        : "new (model.language_model.*, model.visual.*)");
  std::printf("lm_head       %s\n", tied ? "tied to embed_tokens" : "separate (untied)");
  std::printf("tensors       %zu\n", st.size());
  std::printf("parameters    %lld (%.3f M)\n", (long long)params, params / 1e6);
  for (const auto& [dt, b] : bytes_by_dtype)
    std::printf("bytes %-7s %llu (%.1f MB, %zu tensors)\n", dt.c_str(), (unsigned long long)b,
                b / 1e6, count_by_dtype[dt]);
  std::printf("shards        %zu\n", st.files().size());
  const fs::path tok_path = fs::path(dir) / "tokenizer.json";
  if (fs::exists(tok_path)) {
    const auto t1 = clock::now();
    io::Tokenizer tok = io::Tokenizer::from_file(tok_path.string());
    const double tok_ms = std::chrono::duration<double, std::milli>(clock::now() - t1).count();
    std::printf("tokenizer     %d tokens (loaded in %.1f ms)\n", tok.vocab_size(), tok_ms);
  } else {
    std::printf("tokenizer     none (no tokenizer.json)\n");
  }
  std::printf("load time     %.1f ms (config + open + validate)\n", load_ms);
  return 0;
}

}  // namespace

MMRT_COMMAND("inspect", "open and validate a checkpoint folder and summarise it",
             R"(usage: mmrt inspect DIR

Opens a Hugging Face checkpoint folder (config.json, model.safetensors or sharded
model-*.safetensors + model.safetensors.index.json, tokenizer.json) the way the server does:
memory-maps every shard, validates every safetensors header, checks every tensor name, shape and
dtype against the table derived from config.json. Prints the architecture, text and vision
dimensions, the tensor-name convention (old: model.* / visual.*; new: model.language_model.* /
model.visual.*), whether lm_head is tied, tensor and parameter counts, bytes by dtype, the
number of shards, the tokenizer size and the load time (config + open + validate, in ms).

Exits 1 with the loader's message (file, tensor, problem) when the checkpoint is malformed.
Supported architectures: Qwen2VLForConditionalGeneration.
)",
             {}, &run);
