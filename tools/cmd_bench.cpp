// `mmrt bench`: an in-process Poisson load of mixed multimodal requests, every listed policy run
// on the same arrival trace, with a latency / SLO report per policy and class.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_workload.h"
#include "cli.h"
#include "core/clock.h"
#include "core/error.h"
#include "engine/engine.h"
#include "http_load.h"
#include "model_options.h"
#include "obs/report.h"

namespace mmrt::cli {
namespace {

// Bounds of the load a run may ask for: every request of the trace is generated up front.
constexpr double kMaxRate = 10000, kMaxDurationS = 86400, kMaxRequests = 100000;

// The first few requests that did not finish, and why (a run that refuses everything says so).
void show_unfinished(const std::vector<engine::RequestResult>& results) {
  int shown = 0;
  for (const auto& r : results)
    if (r.outcome != engine::Outcome::kFinished && r.outcome != engine::Outcome::kStopped &&
        shown++ < 3)
      std::fprintf(stderr, "[mmrt bench] a request ended %s: %s\n", engine::outcome_name(r.outcome),
                   r.reason.substr(0, 300).c_str());
}

// `policy`: one entry of --policy (apply_policy_option: a name, optionally ":plain" or, for
// slo, ":reserve"; any, ":safe").
obs::Report run_policy(const engine::EngineConfig& base, const std::string& policy,
                       const std::vector<TraceItem>& trace, int warmup, bool progress) {
  engine::EngineConfig cfg = base;
  apply_policy_option(policy, cfg);
  auto eng = engine::Engine::create(cfg);
  // Warm-up: calibrates the cost model and touches the weights; not part of the report.
  if (warmup > 0) {
    std::vector<engine::RequestHandle> hs;
    for (int i = 0; i < warmup && i < static_cast<int>(trace.size()); ++i) {
      engine::GenerateRequest g = trace[static_cast<size_t>(i)].request;
      g.sla_class = cfg.sla.default_class;
      g.tenant = "warmup";  // no cache entries shared with the measured run
      hs.push_back(eng->submit(g));
      if (i % 2 == 1) hs.back().wait();
    }
    for (auto& h : hs) h.wait();
  }
  std::vector<engine::RequestHandle> handles;
  std::vector<std::string> requested;
  const int64_t t0 = now_ns();
  int64_t next_progress = t0 + 1'000'000'000;
  auto report_progress = [&](bool force) {
    if (!progress) return;
    int64_t now = now_ns();
    if (!force && now < next_progress) return;
    next_progress = now + 1'000'000'000;
    auto s = eng->stats();
    std::fprintf(stderr,
                 "\r[%s] %5.1fs  submitted %zu/%zu  finished %lld  refused %lld  running %zu  "
                 "waiting %zu   ",
                 policy.c_str(), static_cast<double>(now - t0) * 1e-9, handles.size(), trace.size(),
                 static_cast<long long>(s.finished - warmup), static_cast<long long>(s.refused),
                 s.running, s.waiting);
    std::fflush(stderr);
  };
  for (const auto& it : trace) {
    int64_t at = t0 + static_cast<int64_t>(it.t_s * 1e9);
    while (now_ns() < at) {
      report_progress(false);
      std::this_thread::sleep_for(
          std::chrono::nanoseconds(std::min<int64_t>(at - now_ns(), 20'000'000)));
    }
    handles.push_back(eng->submit(it.request));
    requested.push_back(it.sla_class);
  }
  std::vector<engine::RequestResult> results;
  for (auto& h : handles) {
    while (!h.next(200).has_value() || false) report_progress(false);
    results.push_back(h.wait());
  }
  report_progress(true);
  if (progress) std::fprintf(stderr, "\n");
  show_unfinished(results);
  int64_t t_end = t0;
  for (const auto& r : results) t_end = std::max(t_end, r.timeline.last(engine::Event::kFinished));
  double duration =
      std::max(static_cast<double>(t_end - t0) * 1e-9, trace.empty() ? 0.0 : trace.back().t_s);
  return obs::make_report(policy, duration, results, requested, cfg.sla, eng->stats());
}

// The trace against a running server (--url): the same report, from the client's clock.
obs::Report run_url(const std::string& url, const engine::SlaConfig& sla,
                    const std::vector<TraceItem>& trace, int warmup, bool progress) {
  std::vector<engine::RequestResult> results = run_http_trace(url, trace, warmup, progress);
  std::vector<std::string> requested;
  show_unfinished(results);
  int64_t start = INT64_MAX, end = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    requested.push_back(trace[i].sla_class);
    start = std::min(start, results[i].timeline.origin());
    end = std::max(end, results[i].timeline.last(engine::Event::kFinished));
  }
  const double duration =
      trace.empty() ? 0 : std::max(static_cast<double>(end - start) * 1e-9, trace.back().t_s);
  return obs::make_report("http", duration, results, requested, sla, engine::EngineStats{});
}

int run_bench(Args& args) {
  engine::EngineConfig cfg;
  const std::string url = args.get_or("url", "");
  cfg.model_dir = url.empty() ? args.require("model") : args.get_or("model", "");
  WorkloadOptions w;
  w.name = args.get_or("workload", "mixed");
  w.rate = args.get_double("rate", 2.0, 0.01, kMaxRate);
  w.duration_s = args.get_double("duration", 10.0, 0.1, kMaxDurationS);
  w.seed = static_cast<uint64_t>(args.get_int("seed", 1, 0, INT64_MAX));
  w.max_tokens = static_cast<int32_t>(args.get_int("max-tokens", 24, 1, 1 << 20));
  w.image_side = static_cast<int>(args.get_int("image-size", 224, 28, 4096));
  std::vector<std::string> policies = split_list(args.get_or("policy", "fcfs,slo"), "policy");
  for (const std::string& p : policies) {
    engine::EngineConfig probe;
    apply_policy_option(p, probe);  // every entry is checked before any run
  }
  std::string json_path = args.get_or("json", "");
  std::string sla_path = args.get_or("sla", "");
  int warmup = static_cast<int>(args.get_int("warmup", 8, 0, 10000));
  bool quiet = args.flag("quiet");
  bool no_admission = args.flag("no-admission");
  bool no_controller = args.flag("no-batch-controller");
  cfg.scheduler.token_budget = step_tokens_option(args);
  cfg.model = load_options(args);
  cfg.kv = kv_options(args);
  set_compute(cfg, compute_options(args));
  cfg.media_sandbox = media_sandbox_options(args, cfg.model_dir);
  args.finish();
  if (w.name == "text") cfg.media_sandbox.enabled = false;  // nothing to decode: no workers
  if (w.name != "mixed" && w.name != "text" && w.name != "image" && w.name != "audio-stall" &&
      w.name != "audio-stream")
    throw InvalidArgument("--workload must be mixed, text, image, audio-stall or audio-stream");
  if (w.rate * w.duration_s > kMaxRequests) {
    char msg[160];
    std::snprintf(msg, sizeof msg,
                  "--rate %g x --duration %g s is %.0f requests, more than the %.0f one run may "
                  "have",
                  w.rate, w.duration_s, w.rate * w.duration_s, kMaxRequests);
    throw InvalidArgument(msg);
  }
  // Fail on a --json path that cannot be written now, not after the whole run.
  if (!json_path.empty() && !std::ofstream(json_path, std::ios::app))
    throw InvalidArgument("cannot write --json file '" + json_path + "'");
  if (!sla_path.empty()) cfg.sla = engine::SlaConfig::load(sla_path);
  for (const auto& [c, p] : w.class_mix) cfg.sla.get(c);
  cfg.admission_control = !no_admission;
  cfg.batch_controller = !no_controller;

  auto trace = make_trace(w);
  if (!quiet)
    std::fprintf(stderr,
                 "[mmrt bench] %zu requests over %.1f s (Poisson %.2f req/s, workload %s, seed "
                 "%llu), policies %s\n",
                 trace.size(), w.duration_s, w.rate, w.name.c_str(),
                 static_cast<unsigned long long>(w.seed),
                 args.get_or("policy", "fcfs,slo").c_str());
  nlohmann::json out = nlohmann::json::array();
  std::vector<obs::Report> reports;
  if (!url.empty()) policies = {"http"};
  for (const auto& p : policies) {
    reports.push_back(url.empty() ? run_policy(cfg, p, trace, warmup, !quiet)
                                  : run_url(url, cfg.sla, trace, warmup, !quiet));
    std::printf("%s\n", reports.back().text().c_str());
    std::fflush(stdout);
    nlohmann::json j = reports.back().json();
    j["workload"] = {{"name", w.name},
                     {"rate", w.rate},
                     {"duration_s", w.duration_s},
                     {"seed", w.seed},
                     {"requests", trace.size()},
                     {"max_tokens", w.max_tokens},
                     {"image_side", w.image_side}};
    out.push_back(j);
  }
  if (reports.size() >= 2 && reports[0].goodput_rps > 0)
    std::printf("goodput %s / %s = %.2fx\n", reports.back().policy.c_str(),
                reports.front().policy.c_str(),
                reports.back().goodput_rps / reports.front().goodput_rps);
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    if (!f) throw InvalidArgument("cannot write --json file '" + json_path + "'");
    f << out.dump(2) << "\n";
  }
  return 0;
}

MMRT_COMMAND(
    "bench", "Poisson load of mixed requests; latency and SLO report per policy",
    "usage: mmrt bench --model DIR [--workload mixed|text|image|audio-stall|audio-stream]\n"
    "                  [--rate R]\n"
    "                  [--duration S] [--policy fcfs,slo] [--seed N] [--json FILE] [options]\n\n"
    "Generates one seeded arrival trace (Poisson, R requests/s for S seconds) of mixed requests:\n"
    "text chat, one image + question, and second turns of conversations about a repeated\n"
    "image; SLA classes mixed 30% platinum / 30% gold / 40% silver. Every listed policy serves\n"
    "the same trace in this process (a fresh engine each, after a warm-up). Prints per policy\n"
    "and class: P50/P95/P99 of TTFT, TPOT and end-to-end, SLO attainment, goodput (requests/s\n"
    "that met their SLA), refusals, cache hit rates and where time went per stage.\n"
    "--workload audio-stall | audio-stream (an audio model): 8 platinum text streams decode\n"
    "while a 12 s utterance (speech-like, with pauses) is spoken; its answer (gold) holds the\n"
    "items the VAD cuts. audio-stall: all of it is decoded, encoded and prefilled when the\n"
    "utterance ends (whole buffer); audio-stream: each item is prefilled (silver, one token)\n"
    "when the VAD closes it, as /v1/realtime does. Compare slo:plain (fixed --step-tokens\n"
    "chunks) with slo (slices sized by the batch controller to the streams' TPOT target): the\n"
    "streams' inter-token gaps show the stalls, gold's TTFT the latency after the speech;\n"
    "--rate and --duration do not apply.\n\n"
    "  --url http://HOST:PORT  send the trace to a running `mmrt serve` instead (open loop,\n"
    "                          streamed chat requests, latency from each scheduled send\n"
    "                          time; --sla must match the server's classes; no --model)\n"
    "  --rate R                requests per second (default 2)\n"
    "  --duration S            seconds of arrivals (default 10)\n"
    "  --policy LIST           comma-separated: fcfs, priority, slo (default fcfs,slo); "
    "NAME:plain\n"
    "                          runs NAME without admission control or batch controller, as an\n"
    "                          engine without SLA classes would (e.g. fcfs:plain,fcfs,slo);\n"
    "                          slo:reserve keeps room for heavier classes' inflow;\n"
    "                          NAME:safe learns a margin per class from late requests\n"
    "  --seed N                trace seed (default 1)\n"
    "  --max-tokens N          tokens generated per request (default 24)\n"
    "  --image-size N          side of the synthetic square images (default 224)\n"
    "  --sla FILE              SLA classes JSON (default: platinum 300/50 ms, gold 800/100 ms,\n"
    "                          silver within 5 s, no TPOT promise)\n"
    "  --warmup N              warm-up requests per policy, not reported (default 8)\n"
    "  --no-admission          serve everything (no refusals or downgrades)\n"
    "  --no-batch-controller   keep the step budget fixed\n"
    "  --json FILE             write the report as JSON\n"
    "  --quiet                 no progress line\n" MMRT_MODEL_OPTIONS_HELP MMRT_SANDBOX_OPTIONS_HELP
    "  --step-tokens N         maximum tokens per engine step (default 512)\n",
    {"quiet", "no-admission", "no-batch-controller", "map-weights", "batch-invariant"}, run_bench);

}  // namespace
}  // namespace mmrt::cli
