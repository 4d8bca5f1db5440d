// `mmrt verify`: the production SLA gate. Loads a server (running, or started here on --model)
// with an open-loop schedule generated from the workload's seed, reads the machine's latency
// knobs before and after, samples throttling and load on the run's timeline, and judges:
// exit 0 PASS, 1 FAIL, 2 INVALID; 3 when the gate could not run at all.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include <unistd.h>

#include "cli.h"
#include "core/clock.h"
#include "core/error.h"
#include "io/file.h"
#include "io/json_fields.h"
#include "local_server.h"
#include "verify/baseline.h"
#include "verify/load.h"
#include "verify/preflight.h"
#include "verify/report_html.h"
#include "verify/summary.h"
#include "verify/telemetry.h"
#include "verify/verdict.h"
#include "verify_requests.h"

namespace mmrt::cli {
namespace {

using nlohmann::json;
constexpr int kCouldNotRun = 3;

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw InvalidArgument("cannot write " + path);
  f << text;
  if (!f.flush()) throw InvalidArgument("cannot write " + path + " (disk full?)");
}

// The default workload's rate: half of what the server does one request at a time (its mean
// service time over a few sequential text and image requests), so the default load is one this
// machine can carry with room for the tail.
double size_to_machine(const std::string& url, bool quiet) {
  verify::Workload probe = verify::default_workload(1);
  probe.duration_s = 1e9;
  VerifyRequests bodies(probe);
  std::vector<verify::Planned> plan;
  for (int i = 0; i < 6; ++i) {
    verify::Planned p;
    p.kind = i % 3 == 2 ? "image" : "text";
    p.kind_index = i % 3 == 2 ? 1 : 0;
    p.seed = 1000 + static_cast<uint64_t>(i);
    p.image_w = 448;
    p.image_h = 336;
    p.max_tokens = 24;
    p.prompt_words = p.kind == "text" ? 48 : 12;
    plan.push_back(p);
  }
  double total_s = 0;
  int n = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    verify::LoadOptions o{.base_url = url, .timeout_s = 60};
    const auto got = verify::run_open_loop(
        {0.0}, [&](size_t) { return bodies.body(plan[i]); }, o);
    if (got[0].status != verify::Status::kOk)
      throw Unavailable("sizing the default workload: a probe request failed: " + got[0].error);
    if (i >= 2) {  // the first two warm the server up
      total_s += static_cast<double>(got[0].done_ns - got[0].scheduled_ns) * 1e-9;
      ++n;
    }
  }
  const double service_s = total_s / n;
  const double rate = std::clamp(0.5 / service_s, 0.2, 50.0);
  if (!quiet)
    std::fprintf(stderr,
                 "[verify] default workload sized to this machine: %.2f requests/s (half of one "
                 "at a time: %.0f ms per request)\n",
                 rate, service_s * 1e3);
  return rate;
}

int run(Args& args) {
  const std::string url_opt = args.get_or("url", "");
  const std::string model = args.get_or("model", "");
  const std::string workload_file = args.get_or("workload", "");
  const auto duration = args.get("duration");
  const double duration_s = args.get_double("duration", 300, 1, 86400);
  const auto warmup = args.get("warmup");
  const double warmup_s = args.get_double("warmup", 10, 0, 3600);
  const auto rate_opt = args.get("rate");
  const double rate = args.get_double("rate", 0, 0.01, 10000);
  const auto seed_opt = args.get("seed");
  const int64_t seed = args.get_int("seed", 1, 0, INT64_MAX);
  const std::string baseline_file = args.get_or("baseline", "");
  const std::string save_baseline = args.get_or("save-baseline", "");
  const std::string report = args.get_or("report", "");
  const std::string json_out = args.get_or("json", "");
  const std::string mode = args.get_choice<std::string>(
      "preflight", "warn", {{"strict", "strict"}, {"warn", "warn"}, {"off", "off"}});
  verify::SystemRoots roots;
  roots.sysfs = args.get_or("sysfs-root", "/sys");
  roots.procfs = args.get_or("procfs-root", "/proc");
  roots.live = roots.sysfs == "/sys" && roots.procfs == "/proc";
  const std::string server_log = args.get_or("server-log", "mmrt-verify-server.log");
  const std::vector<std::string> server_args = args.get_all("server-arg");
  const double ready_s = args.get_double("ready-timeout", 300, 1, 3600);
  const bool quiet = args.flag("quiet");
  args.finish();
  if (url_opt.empty() == model.empty())
    throw InvalidArgument(
        "give exactly one of --url http://HOST:PORT (a running server) or --model DIR "
        "(start one here)");
  if (!model.empty() && !std::filesystem::is_directory(model))
    throw NotFound("--model " + model + " is not a directory");

  // Everything the options name is checked before any load is sent.
  json baseline;
  if (!baseline_file.empty()) {
    baseline = io::parse_json_object(
        io::read_file(baseline_file, {.what = "baseline", .max_bytes = 256u << 20}), baseline_file);
    verify::check_baseline(baseline, baseline_file);
  }
  verify::Workload w =
      workload_file.empty() ? verify::default_workload(0) : verify::load_workload(workload_file);
  if (duration) w.duration_s = duration_s;
  if (warmup) w.warmup_s = warmup_s;
  if (seed_opt) w.seed = static_cast<uint64_t>(seed);
  if (rate_opt) w.rate = rate;
  if (!workload_file.empty() || rate_opt)  // the default's rate is only known after sizing
    verify::validate_workload(w, workload_file.empty() ? "the default workload with the options"
                                                       : workload_file + " with the options");
  // Output files are opened now: a path that cannot be written fails before the run, not after.
  for (const std::string& path : {json_out, report, save_baseline})
    if (!path.empty()) write_file(path, "");
  VerifyRequests bodies(w);
  if (!roots.live) verify::sys::require_roots(roots);

  std::unique_ptr<LocalServer> local;
  if (!model.empty()) {
    if (!quiet)
      std::fprintf(stderr, "[verify] starting mmrt serve --model %s (log: %s)\n", model.c_str(),
                   server_log.c_str());
    local = std::make_unique<LocalServer>(model, server_args, server_log, ready_s);
  }
  std::string url = local ? local->url() : url_opt;
  while (url.size() > 1 && url.back() == '/') url.pop_back();
  if (http_get_status(url + "/health", 10) != 200)
    throw Unavailable(url + "/health does not answer 200: is the server running and loaded?");
  if (!rate_opt && workload_file.empty()) {
    w.rate = size_to_machine(url, quiet);
    verify::validate_workload(w, "the default workload");
  }

  std::vector<verify::Check> before;
  std::vector<std::string> strict;
  const auto required =
      w.preflight_required.empty() ? verify::default_required_checks() : w.preflight_required;
  if (mode != "off") {
    before = verify::run_preflight(roots, required);
    if (mode == "strict") strict = verify::strict_failures(before);
  }
  const std::vector<verify::Planned> plan = verify::make_schedule(w, bodies.image_counts());
  if (plan.empty()) throw InvalidArgument("the workload schedules no request in its duration");
  std::vector<double> times;
  for (const auto& p : plan) times.push_back(p.t_s);
  if (!quiet)
    std::fprintf(stderr,
                 "[verify] %s: %zu requests over %.0f s (warm-up %.0f s), seed %llu, against %s\n",
                 w.name.c_str(), plan.size(), w.duration_s, w.warmup_s,
                 static_cast<unsigned long long>(w.seed), url.c_str());

  const int64_t t0 = now_ns() + 200'000'000;  // time to build the first bodies
  verify::TelemetrySampler telemetry(roots, std::chrono::milliseconds(1000), t0);
  telemetry.start();
  verify::LoadOptions lo{.base_url = url, .timeout_s = w.timeout_s};
  const bool tty = ::isatty(2);
  if (!quiet)
    lo.progress = [&, tty](double t, size_t sent, size_t finished) {
      // A line every 10 s into a log, one line rewritten every second on a terminal.
      if (!tty && static_cast<int64_t>(t) % 10 != 0) return;
      std::fprintf(stderr, "%s[verify] %6.1f / %.0f s  sent %zu / %zu  finished %zu%s",
                   tty ? "\r" : "", t, w.duration_s, sent, plan.size(), finished,
                   tty ? "   " : "\n");
      std::fflush(stderr);
    };
  verify::RunRecord rec;
  rec.observed = verify::run_open_loop(
      times, [&](size_t i) { return bodies.body(plan[i]); }, lo, t0);
  telemetry.stop();
  if (!quiet && tty) std::fprintf(stderr, "\n");
  std::vector<verify::Check> after;
  if (mode != "off") {
    after = verify::run_preflight(roots, required);
    if (mode == "strict")
      for (const auto& f : verify::strict_failures(after))
        if (std::find(strict.begin(), strict.end(), f) == strict.end())
          strict.push_back(f + " (after the run)");
  }
  rec.workload = w;
  rec.plan = plan;
  rec.t0_ns = t0;
  rec.url = url;
  rec.preflight_mode = mode;
  rec.preflight_before = verify::checks_json(before);
  rec.preflight_after = verify::checks_json(after);
  rec.strict_failures = strict;
  rec.telemetry = verify::telemetry_json(telemetry.samples());
  json fp = json::object();
  for (const auto& [k, v] : verify::fingerprint(roots)) fp[k] = v;
  fp["mmrt_version"] = "0.1.0";
  rec.fingerprint = fp;
  rec.baseline = baseline;
  rec.baseline_file = baseline_file;
  if (local) local->stop();

  const json result = verify::evaluate(rec);
  std::printf("%s", verify::render_text(result).c_str());
  if (!json_out.empty()) write_file(json_out, result.dump(1));
  if (!report.empty()) write_file(report, verify::render_html(result));
  if (!save_baseline.empty()) {
    if (verify::outcome_of(result) != verify::Outcome::kPass)
      std::fprintf(stderr,
                   "[verify] warning: saving a baseline from a %s run; a baseline should be a "
                   "run that passed\n",
                   result.value("verdict", "").c_str());
    write_file(save_baseline, verify::make_baseline(result).dump(1));
  }
  for (const auto& [what, path] :
       {std::pair{"result", json_out}, {"report", report}, {"baseline", save_baseline}})
    if (!path.empty()) std::printf("%s: %s\n", what, path.c_str());
  return static_cast<int>(verify::outcome_of(result));
}

int run_verify(Args& args) {
  try {
    return run(args);
  } catch (const Error& e) {
    std::fprintf(stderr, "\nmmrt verify: could not run (%s): %s\n",
                 std::string(error_code_name(e.code())).c_str(), e.what());
    return kCouldNotRun;
  } catch (const std::exception& e) {  // a file system or library error: still not a verdict
    std::fprintf(stderr, "\nmmrt verify: could not run: %s\n", e.what());
    return kCouldNotRun;
  }
}

}  // namespace

MMRT_COMMAND(
    "verify", "the production SLA gate: load a server, judge P50/P99 per class, exit 0/1/2",
    "usage: mmrt verify (--url http://HOST:PORT | --model DIR) [--workload FILE] [--duration 300]\n"
    "                   [--baseline lab.json] [--save-baseline FILE] [--report report.html]\n"
    "                   [--json result.json] [--preflight strict|warn|off]\n\n"
    "Runs a real-time latency test against a server for a fixed time and gates on it: every\n"
    "request is sent open-loop at its scheduled time (a seeded schedule made before the run) and\n"
    "measured from that time; each SLA class's P50/P99 TTFT, TPOT and end-to-end claims are "
    "judged\n"
    "with the binomial bound (a P99 claim at 95 % confidence needs >= 299 samples with none over\n"
    "budget); frame streams fail on k consecutive misses; errors, timeouts and refusals count as\n"
    "violations. The machine's latency knobs are read before and after (docs/verify.md).\n\n"
    "exit status: 0 PASS, 1 FAIL (a rule broken), 2 INVALID (the measurement cannot be trusted:\n"
    "strict preflight failed, too few samples for a claim, generator lag, throttling, no steady\n"
    "state), 3 the gate could not run (bad options, server not reachable).\n\n"
    "server:\n"
    "  --url URL             a running mmrt serve (its /health must answer 200)\n"
    "  --model DIR           start `mmrt serve --model DIR` on a free loopback port instead, and\n"
    "                        stop it after the run\n"
    "  --server-arg ARG      pass ARG to that server (repeatable: --server-arg=--policy\n"
    "                        --server-arg=fcfs)\n"
    "  --server-log FILE     its log (default mmrt-verify-server.log)\n"
    "  --ready-timeout S     wait this long for it to load (default 300)\n\n"
    "load:\n"
    "  --workload FILE       a workload (.json, .yaml, .yml; docs/verify.md); default: mixed text "
    "+\n"
    "                        image chat with repeated-image turns in platinum/gold/silver, at "
    "half\n"
    "                        the rate this server sustains one request at a time\n"
    "  --duration S          override the workload's duration (default 300)\n"
    "  --warmup S            override its warm-up, excluded from the verdict (default 10)\n"
    "  --rate R              override its Poisson rate (requests per second)\n"
    "  --seed N              override its seed\n\n"
    "judging:\n"
    "  --preflight MODE      strict: a failed or unreadable required check makes the run INVALID;\n"
    "                        warn (default): reported only; off: not read\n"
    "  --baseline FILE       compare with a saved run: P50, P99 and jitter deltas judged against\n"
    "                        the workload's baseline_tolerance_pct, max shown; the fingerprint\n"
    "                        differences listed as likely causes\n"
    "  --sysfs-root DIR, --procfs-root DIR  read the knobs from copies (tests)\n\n"
    "output:\n"
    "  --json FILE           the result with every figure and every request\n"
    "  --report FILE         one self-contained offline HTML report\n"
    "  --save-baseline FILE  this run as a baseline for later runs\n"
    "  --quiet               no progress on stderr",
    {"quiet"}, run_verify);

}  // namespace mmrt::cli
