#include "server/server.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "core/clock.h"
#include "models/registry.h"
#include "server/service.h"

namespace mmrt::server {
namespace {

// What each class takes on this machine once warmed up: the longest text prompt whose own work
// alone admission finds within the class's first-token promise (GET /v1/sla has it live).
std::string classes_line(const engine::Quote& q, const engine::SlaConfig& sla) {
  std::string line = "the classes take text prompts, by their own work alone, of up to:";
  const char* sep = " ";
  for (const engine::Quote::Class& c : q.classes) {
    const std::string length = c.prompt_tokens_alone >= engine::Quote::kMaxQuotedPrompt
                                   ? "any length"
                                   : std::to_string(c.prompt_tokens_alone) + " tokens";
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s%s %s (%.0f ms to first token)", sep, c.name.c_str(),
                  length.c_str(), static_cast<double>(sla.get(c.name).ttft_ns) * 1e-6);
    line += buf;
    sep = ", ";
  }
  return line + "; media costs more (GET /v1/sla)";
}

}  // namespace

int run_server(ServerConfig cfg) {
  if (cfg.api.model_id.empty()) cfg.api.model_id = default_model_id(cfg.engine.model_dir);
  cfg.api.tiers = tiers_for(cfg.engine.sla, std::move(cfg.api.tiers));
  if (!cfg.trace_dir.empty()) std::filesystem::create_directories(cfg.trace_dir);
  // A folder that is not a checkpoint fails now, not after the server has started listening.
  models::family_for_checkpoint(cfg.engine.model_dir);
  // (Before listening.) Every connection is a descriptor: raise the soft limit as far as the
  // connection cap needs (within the hard limit) and say so when it stays below.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    const rlim_t want = static_cast<rlim_t>(cfg.http.max_connections) + 256;
    if (nofile.rlim_cur < want) {
      nofile.rlim_cur = std::min(want, nofile.rlim_max);
      setrlimit(RLIMIT_NOFILE, &nofile);
    }
    if (nofile.rlim_cur < want)
      std::fprintf(stderr,
                   "mmrt serve: the descriptor limit (%llu) is below --max-connections %d + 256; "
                   "connections beyond it are refused\n",
                   static_cast<unsigned long long>(nofile.rlim_cur), cfg.http.max_connections);
  }
  Service svc(cfg);
  HttpServer http(cfg.http, [&svc](HttpRequest req, std::shared_ptr<Exchange> ex) {
    svc.handle(std::move(req), std::move(ex));
  });
  svc.set_http(&http);
  http.on_signal([&svc](int sig) { svc.shutdown(sig); });
  http.every(std::chrono::milliseconds(250), [&svc] { svc.tick(); });
  std::fprintf(stderr, "[mmrt] listening on http://%s:%d (model %s loading)\n",
               cfg.http.host.c_str(), http.port(), cfg.api.model_id.c_str());
  if (cfg.on_state) cfg.on_state(http.port(), false);

  std::string load_error;
  std::thread loader([&] {
    try {
      Stopwatch sw;
      auto eng = engine::Engine::create(cfg.engine);
      const double load_s = sw.seconds();
      // One request before the first client's: a prefill of four steps' worth of tokens (up to
      // 4 x 512) and a decode step. The first forward passes' one-time costs (page faults,
      // kernel set-up at these shapes) would otherwise land in someone's time to first token,
      // and the cost model sees real prefill steps, the later ones attending the earlier (its
      // prompt-pair term): admission would otherwise price the first prompts, and the first
      // long one's attention, at its prior.
      engine::GenerateRequest warm;
      const int32_t n = std::clamp(cfg.engine.scheduler.token_budget, 8, 512);
      for (int32_t i = 0; i < 4 * n; ++i) warm.prompt_ids.push_back(i % 8);
      warm.sampling.max_tokens = 2;
      const engine::RequestResult w = eng->submit(std::move(warm)).wait();
      if (const std::string c = engine::encoder_calibration_text(eng->stats().encoder_calibration);
          !c.empty())
        std::fprintf(stderr, "[mmrt] %s\n", c.c_str());
      if (eng->backend().records_step_graphs())
        std::fprintf(stderr, "[mmrt] %s\n", eng->stats().step_graphs.c_str());
      if (cfg.on_loaded) cfg.on_loaded(*eng);
      if (cfg.engine.admission_control)
        std::fprintf(stderr, "[mmrt] %s\n", classes_line(eng->quote(), cfg.engine.sla).c_str());
      const std::string backend = eng->backend().describe();
      svc.set_engine(std::move(eng));
      std::fprintf(stderr,
                   "[mmrt] model %s loaded in %.1f s, warmed up in %.0f ms (%s) on %s; ready\n",
                   cfg.api.model_id.c_str(), load_s, (sw.seconds() - load_s) * 1e3,
                   engine::outcome_name(w.outcome), backend.c_str());
      if (cfg.on_state) cfg.on_state(http.port(), true);
    } catch (const std::exception& e) {
      load_error = e.what();
      http.stop();
    }
  });
  http.run();
  loader.join();
  svc.stop_workers();
  if (!load_error.empty()) {
    std::fprintf(stderr, "mmrt serve: the model failed to load: %s\n", load_error.c_str());
    return 1;
  }
  // Whatever is still in flight ends with the engine (cancelled).
  svc.release_engine().reset();
  std::fprintf(stderr, "[mmrt] stopped\n");
  return 0;
}

std::string default_model_id(const std::string& model_dir) {
  std::filesystem::path p(model_dir);
  if (p.filename().empty()) p = p.parent_path();  // "dir/"
  const std::string id = p.filename().string();
  return id.empty() ? "mmrt" : id;
}

}  // namespace mmrt::server
