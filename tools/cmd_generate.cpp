// `mmrt generate`: chat-formatted text generation on the CPU, streamed to stdout.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.h"
#include "core/error.h"
#include "engine/batch_runner.h"
#include "io/chat_template.h"
#include "io/generation_config.h"
#include "io/tokenizer.h"
#include "models/qwen2_vl/language_model.h"
#include "model_options.h"

namespace fs = std::filesystem;

namespace mmrt::cli {
namespace {

int run_generate(Args& args) {
  std::string dir = args.require("model");
  std::vector<std::string> prompts = args.get_all("prompt");
  std::string system = args.get_or("system", "");
  bool raw = args.flag("raw");
  bool quiet = args.flag("quiet");
  engine::SamplingParams sp;
  sp.max_tokens = static_cast<int32_t>(args.get_int("max-tokens", 128));
  sp.temperature = static_cast<float>(args.get_double("temperature", 0.0));
  sp.top_k = static_cast<int32_t>(args.get_int("top-k", 0));
  sp.top_p = static_cast<float>(args.get_double("top-p", 1.0));
  sp.min_p = static_cast<float>(args.get_double("min-p", 0.0));
  sp.repetition_penalty = static_cast<float>(args.get_double("repetition-penalty", 1.0));
  sp.presence_penalty = static_cast<float>(args.get_double("presence-penalty", 0.0));
  sp.frequency_penalty = static_cast<float>(args.get_double("frequency-penalty", 0.0));
  sp.seed = static_cast<uint64_t>(args.get_int("seed", 0));
  sp.stop = args.get_all("stop");
  sp.ignore_eos = args.flag("ignore-eos");
  int32_t budget = static_cast<int32_t>(args.get_int("step-tokens", 512));
  models::LanguageModelOptions mopts = language_model_options(args);
  args.finish();
  if (prompts.empty()) throw InvalidArgument("give at least one --prompt TEXT");
  sp.validate();

  auto tok = io::Tokenizer::from_file((fs::path(dir) / "tokenizer.json").string());
  auto gen = io::load_generation_config((fs::path(dir) / "generation_config.json").string());
  auto model = models::LanguageModel::load(dir, mopts);

  std::vector<engine::TextRequest> reqs;
  for (const auto& p : prompts) {
    engine::TextRequest r;
    std::string text = p;
    if (!raw) {
      std::vector<io::ChatMessage> msgs;
      if (!system.empty()) msgs.push_back(io::ChatMessage::text("system", system));
      msgs.push_back(io::ChatMessage::text("user", p));
      text = io::render_qwen2_vl_chat(msgs);
    }
    r.prompt = tok.encode(text);
    r.sampling = sp;
    r.stop_ids = gen.eos_token_ids;
    r.stop_ids.push_back(static_cast<int32_t>(model->config().eos_token_id));
    reqs.push_back(std::move(r));
  }

  engine::BatchRunnerOptions ro;
  ro.step_token_budget = budget;
  if (reqs.size() == 1) {
    ro.on_text = [](size_t, const std::string& t) {
      std::fwrite(t.data(), 1, t.size(), stdout);
      std::fflush(stdout);
    };
  }
  engine::RunStats st;
  auto results = engine::run_text_batch(*model, tok, reqs, ro, &st);
  if (reqs.size() == 1) {
    std::printf("\n");
  } else {
    for (size_t i = 0; i < results.size(); ++i)
      std::printf("--- [%zu] %s\n%s\n", i, results[i].finish_reason.c_str(), results[i].text.c_str());
  }
  if (!quiet) {
    std::fprintf(stderr,
                 "[mmrt] %zu request(s), weights %s: prefill %lld tokens in %.1f ms (%.1f tok/s), "
                 "decode %lld tokens in %.1f ms (%.1f tok/s), %lld steps\n",
                 reqs.size(), std::string(kernels::weight_format_name(model->weight_format())).c_str(),
                 static_cast<long long>(st.prompt_tokens), st.prefill_seconds * 1e3,
                 st.prefill_seconds > 0 ? static_cast<double>(st.prompt_tokens) / st.prefill_seconds : 0.0,
                 static_cast<long long>(st.generated_tokens - static_cast<int64_t>(reqs.size())),
                 st.decode_seconds * 1e3,
                 st.decode_seconds > 0
                     ? static_cast<double>(st.generated_tokens - static_cast<int64_t>(reqs.size())) / st.decode_seconds
                     : 0.0,
                 static_cast<long long>(st.steps));
  }
  return 0;
}

MMRT_COMMAND("generate", "generate text from a prompt (chat template applied), streamed",
             "usage: mmrt generate --model DIR --prompt TEXT [--prompt TEXT ...] [options]\n\n"
             "Renders the model's chat template around each prompt, runs it on the CPU and streams\n"
             "the reply to stdout (several --prompt run batched and print when done). Ends with\n"
             "prefill and decode speed on stderr.\n\n"
             "prompt:\n"
             "  --system TEXT           system message (default: the template's)\n"
             "  --raw                   send the prompt as is, without the chat template\n"
             "sampling:\n"
             "  --max-tokens N          tokens to generate at most (default 128)\n"
             "  --temperature T         0 = greedy (default 0)\n"
             "  --top-k K / --top-p P / --min-p P   filters (defaults off)\n"
             "  --repetition-penalty R  HF-style, over prompt and output (default 1)\n"
             "  --presence-penalty P / --frequency-penalty F   OpenAI-style (default 0)\n"
             "  --seed N                sampling seed (default 0)\n"
             "  --stop TEXT             stop string (repeatable); --ignore-eos keeps going\n"
             "runtime:\n" MMRT_MODEL_OPTIONS_HELP
             "  --step-tokens N         token budget per step (prefill chunk size; default 512)\n"
             "  --quiet                 no speed line\n",
             {"raw", "ignore-eos", "quiet"}, run_generate);

}  // namespace
}  // namespace mmrt::cli
