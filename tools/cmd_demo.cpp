// `mmrt demo`: the README's main command. Generates the tiny checkpoint (unless present), loads
// it the way a real checkpoint is loaded, shows what was loaded, generates through the engine,
// runs a short SLA benchmark, then serves it over HTTP to the official openai client, then
// gates it with mmrt verify.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli.h"
#include "core/clock.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "kernels/backend.h"
#include "kernels/registry.h"
#include "models/registry.h"
#include "models/tiny_registry.h"

namespace fs = std::filesystem;

namespace mmrt::cli {
namespace {

int run_demo(Args& args) {
  std::string dir = args.get_or("dir", "build/demo/tiny-qwen2-vl");
  bool regen = args.flag("regenerate");
  args.finish();

  std::printf("== 1. tiny Qwen2-VL checkpoint (%s)\n", dir.c_str());
  if (regen || !fs::exists(fs::path(dir) / "config.json")) {
    models::TinyModelOptions opts;
    opts.size = "tiny";
    ThreadPool pool(cpu_count());
    opts.pool = &pool;
    auto r = models::make_tiny_model(models::family_named("qwen2-vl"), dir, opts);
    std::printf("   generated %zu tensors, %lld parameters, %zu files in %.2f s\n", r.n_tensors,
                static_cast<long long>(r.n_params), r.files.size(), r.seconds);
  } else {
    std::printf("   already present (pass --regenerate to write it again)\n");
  }

  std::printf("== 2. load (the registry picks the family from config.json)\n");
  Stopwatch sw;
  const models::ModelFamily& family = models::family_for_checkpoint(dir);
  const models::InspectLines lines = family.inspect(dir).lines;
  const std::unique_ptr<kernels::Backend> bep = kernels::create_backend(Device{});
  const kernels::Backend& be = *bep;
  const models::Model model = models::load_model(be, dir);
  auto tok = models::load_tokenizer(dir);
  models::check_tokenizer(tok, model.spec.vocab_size, dir);
  double ms = sw.millis();
  auto st = io::SafeTensors::open(dir);
  std::printf("   family %s, computing on %s\n   %s\n", family.name, be.describe().c_str(),
              kernels::describe_backends().c_str());
  for (const auto& [label, value] : lines)
    std::printf("   %-12s %s\n", label.c_str(), value.c_str());
  std::printf("   %zu tensors, %.2f MB in %zu file(s), tokenizer of %d tokens, loaded in %.1f ms\n",
              st.size(), static_cast<double>(st.total_bytes()) / 1e6, st.files().size(),
              tok.vocab_size(), ms);

  std::printf("== 3. tokenizer round trip\n");
  const std::string text = "Hello, mmrt! 你好 🙂 <|im_start|>user\nx = 42;<|im_end|>";
  auto ids = tok.encode(text);
  std::string back = tok.decode(ids);
  std::printf("   text : %s\n   ids  :", text.c_str());
  for (int32_t id : ids) std::printf(" %d", id);
  std::printf("\n   back : %s\n   %s\n", back.c_str(),
              back == text ? "round trip OK" : "ROUND TRIP MISMATCH");
  if (back != text) return 1;

  std::printf("== 4. generation through the engine (random weights: the text is noise)\n");
  std::fflush(stdout);
  std::string self = fs::read_symlink("/proc/self/exe").string();
  auto sh = [&](const std::string& a) {
    std::fflush(stdout);
    int rc = std::system((self + " " + a).c_str());
    if (rc != 0) throw InternalError("demo step failed: mmrt " + a);
  };
  sh("generate --model " + dir + " --prompt 'Say hello to mmrt.' --max-tokens 16 --ignore-eos");
  std::printf("== 5. a short SLA benchmark: the same Poisson trace under fcfs and slo\n");
  sh("bench --model " + dir + " --rate 8 --duration 3 --policy fcfs,slo --quiet");
  std::printf("== 6. the server: mmrt serve, talked to with the official openai client\n");
  std::fflush(stdout);
  if (!fs::exists("scripts/demo_server.sh") || !fs::exists("tests/js/node_modules/openai")) {
    std::printf("   skipped: run from the repository root after scripts/setup.sh (make demo)\n");
    return 0;
  }
  if (std::system(("bash scripts/demo_server.sh " + self + " " + dir).c_str()) != 0)
    throw InternalError("demo step failed: the server demo (scripts/demo_server.sh)");
  std::printf("== 7. the SLA gate: mmrt verify, 40 s of mixed load against a server it starts\n");
  const std::string report = (fs::path(dir).parent_path() / "verify-report.html").string();
  std::fflush(stdout);
  const int rc =
      std::system((self + " verify --model " + dir +
                   " --workload docs/examples/verify-comfortable.yaml --report " + report +
                   " --server-log " + (fs::path(dir).parent_path() / "verify-server.log").string())
                      .c_str());
  // PASS, FAIL and INVALID are all answers (a busy machine may give either of the last two);
  // only "could not run" is a failure of the demo.
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) > 2)
    throw InternalError("demo step failed: mmrt verify could not run");
  std::printf("   the report: %s (open it in a browser; docs/verify.md explains it)\n",
              report.c_str());
  return 0;
}

MMRT_COMMAND(
    "demo", "generate the tiny model and run it end to end (what `make demo` runs)",
    "usage: mmrt demo [--dir DIR] [--regenerate]\n\n"
    "Writes a tiny random Qwen2-VL checkpoint in the Hugging Face layout (unless DIR\n"
    "already holds one), loads it with the same code that loads a real checkpoint, and\n"
    "shows what was loaded and a tokenizer round trip, generates a reply through the engine\n"
    "and runs a 3-second `mmrt bench` (fcfs vs slo on one Poisson trace); then starts\n"
    "`mmrt serve` on it, sends a text and an image request with the official openai client\n"
    "(scripts/demo_server.sh), prints the replies, their stage breakdown and a /metrics\n"
    "excerpt, and stops the server; finally runs `mmrt verify` (the SLA gate) for 40 s with\n"
    "docs/examples/verify-comfortable.yaml and writes its HTML report next to the model.\n\n"
    "  --dir DIR       checkpoint folder (default build/demo/tiny-qwen2-vl)\n"
    "  --regenerate    write the checkpoint again even if present\n",
    {"regenerate"}, run_demo);

}  // namespace
}  // namespace mmrt::cli
