// mmrt inspect: opens and validates a checkpoint folder and prints what it holds.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "models/registry.h"

namespace {

using namespace mmrt;
namespace fs = std::filesystem;

int run(cli::Args& args) {
  args.finish();
  if (args.positional().size() != 1)
    throw InvalidArgument("expected exactly one checkpoint folder (see mmrt inspect --help)");
  const std::string dir = args.positional()[0];

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const models::ModelFamily& family = models::family_for_checkpoint(dir);
  const models::Inspection ins = family.inspect(dir);  // config + every tensor checked
  const auto t1 = clock::now();
  const io::Tokenizer tok = models::load_tokenizer(dir);
  const double tok_ms = std::chrono::duration<double, std::milli>(clock::now() - t1).count();
  models::check_tokenizer(tok, ins.vocab_size, dir);
  const io::SafeTensors st = io::SafeTensors::open(dir);
  const double load_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();

  int64_t params = 0;
  std::map<std::string, uint64_t> bytes_by_dtype;
  std::map<std::string, size_t> count_by_dtype;
  for (const auto& n : st.names()) {
    const io::TensorInfo& info = st.info(n);
    params += shape_numel(info.shape);
    bytes_by_dtype[std::string(dtype_name(info.dtype))] += info.end - info.begin;
    count_by_dtype[std::string(dtype_name(info.dtype))] += 1;
  }
  std::printf("checkpoint    %s\n", dir.c_str());
  std::printf("family        %s\n", family.name);
  for (const auto& [label, value] : ins.lines)
    std::printf("%-13s %s\n", label.c_str(), value.c_str());
  std::printf("tensors       %zu\n", st.size());
  std::printf("parameters    %lld (%.3f M)\n", (long long)params, params / 1e6);
  for (const auto& [dt, b] : bytes_by_dtype)
    std::printf("bytes %-7s %llu (%.1f MB, %zu tensors)\n", dt.c_str(), (unsigned long long)b,
                b / 1e6, count_by_dtype[dt]);
  std::printf("shards        %zu\n", st.files().size());
  std::printf("tokenizer     %d tokens (loaded in %.1f ms; every id has an embedding row)\n",
              tok.vocab_size(), tok_ms);
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

Exits 1 with the loader's message (file, tensor, problem) when the checkpoint is malformed, and
with the list of supported architectures when its config.json names another one (the families
are registered in src/models/registry.cpp; today Qwen2VLForConditionalGeneration).
)",
             {}, &run);
