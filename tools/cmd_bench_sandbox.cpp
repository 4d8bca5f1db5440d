// `mmrt bench-sandbox`: what decoding in the media sandbox costs per image, against decoding in
// this process, measured in the same run. Each iteration runs both on the same image, in
// alternating order; the overhead is the median of the per-iteration ratios (robust to the
// machine's load drifting during the run), next to the medians and means of each.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"
#include "core/buffer_cache.h"
#include "core/clock.h"
#include "core/error.h"
#include "io/file.h"
#include "media/image.h"
#include "model_options.h"
#include "models/registry.h"
#include "obs/report.h"
#include "sandbox/media_sandbox.h"

namespace mmrt::cli {
namespace {

using obs::mean;
using obs::median;

// Reads every feature once, as the encoder's first layer does (so a slower first read of shared
// memory would show).
double read_once(const Tensor& t) {
  const float* p = static_cast<const float*>(t.raw());
  const size_t n = t.nbytes() / sizeof(float);
  double s = 0;
  for (size_t i = 0; i < n; i += 16) s += p[i];  // one load per 64-byte line
  return s;
}

bool same(const models::PreparedMedia& a, const models::PreparedMedia& b) {
  return a.dims == b.dims && a.n_tokens == b.n_tokens && a.features.shape() == b.features.shape() &&
         a.features.dtype() == b.features.dtype() &&
         std::memcmp(a.features.raw(), b.features.raw(), a.features.nbytes()) == 0;
}

int run(Args& args) {
  const std::string dir = args.require("model");
  const std::vector<std::string> images = args.get_all("image");
  const int iterations = static_cast<int>(args.get_int("iterations", 20, 1, 100000));
  const int warmup = static_cast<int>(args.get_int("warmup", 3, 0, 1000));
  const std::string json_path = args.get_or("json", "");
  const io::FileLimit limit = image_file_limit(args);
  const ComputeOptions co = compute_options(args);
  sandbox::MediaSandboxConfig sc = media_sandbox_options(args, dir);
  args.finish();
  if (images.empty()) throw InvalidArgument("give at least one --image FILE");
  if (!json_path.empty() && !std::ofstream(json_path, std::ios::app))
    throw InvalidArgument("cannot write --json file '" + json_path + "'");
  sc.enabled = true;
  sc.isa = std::min(co.host.max_isa, best_isa());

  const std::unique_ptr<models::Processor> processor = models::load_processor(dir);
  media::MediaContext ctx;  // as the engine's media threads: one thread, cached buffers
  ctx.isa = sc.isa;
  ctx.buffers = BufferCache::create();
  Stopwatch start_sw;
  sandbox::MediaSandbox sb(sc, 1);
  std::printf("media sandbox: 1 worker ready in %.1f ms (worker %s)\n", start_sw.millis(),
              sc.worker_exe.empty() ? "this executable" : sc.worker_exe.c_str());
  std::printf("%-28s %10s %21s %21s %9s %9s %s\n", "image", "bytes", "in-process ms (p50/mean)",
              "sandbox ms (p50/mean)", "ratio p50", "(range)", "identical");
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& path : images) {
    const std::vector<uint8_t> bytes = io::read_file_bytes(path, limit);
    const models::MediaEstimate est = processor->estimate(models::Modality::kImage, bytes);
    sandbox::Job job;
    job.bytes = bytes;
    job.tenant = "bench";
    job.estimate = est;
    std::vector<double> a_ms, b_ms, ratio;
    bool identical = true;
    double sink = 0;
    for (int i = -warmup; i < iterations; ++i) {
      double t[2] = {0, 0};
      for (int k = 0; k < 2; ++k) {
        const bool sandboxed = (k == 0) == (i % 2 == 0);  // alternate which goes first
        Stopwatch sw;
        models::PreparedMedia m = sandboxed
                                      ? sb.preprocess(0, job)
                                      : processor->preprocess(models::Modality::kImage, bytes, ctx);
        sink += read_once(m.features);
        t[sandboxed ? 1 : 0] = sw.millis();
        if (i == 0 && sandboxed)
          identical = same(m, processor->preprocess(models::Modality::kImage, bytes, ctx));
      }
      if (i < 0) continue;
      a_ms.push_back(t[0]);
      b_ms.push_back(t[1]);
      ratio.push_back(t[1] / t[0]);
    }
    if (sink == 0.125) std::printf(" ");  // keeps the reads
    const std::string name = std::filesystem::path(path).filename().string();
    char label[64];
    std::snprintf(label, sizeof label, "%s %lldpx", name.c_str(),
                  static_cast<long long>(est.source_pixels));
    const auto [lo, hi] = std::minmax_element(ratio.begin(), ratio.end());
    std::printf("%-28s %10zu %10.2f / %8.2f %10.2f / %8.2f %9.3f %4.2f-%4.2f %s\n", label,
                bytes.size(), median(a_ms), mean(a_ms), median(b_ms), mean(b_ms), median(ratio),
                *lo, *hi, identical ? "yes" : "NO");
    out.push_back({{"image", name},
                   {"bytes", bytes.size()},
                   {"source_pixels", est.source_pixels},
                   {"feature_bytes", est.feature_bytes},
                   {"iterations", iterations},
                   {"in_process_ms", {{"median", median(a_ms)}, {"mean", mean(a_ms)}}},
                   {"sandbox_ms", {{"median", median(b_ms)}, {"mean", mean(b_ms)}}},
                   {"ratio_median", median(ratio)},
                   {"identical", identical}});
    if (!identical) throw InternalError(name + ": the sandbox's features differ from in-process");
  }
  const sandbox::SandboxStats st = sb.stats();
  std::printf("sandbox: %lld items, %lld workers started, %lld lost\n",
              static_cast<long long>(st.items), static_cast<long long>(st.workers_started),
              static_cast<long long>(st.workers_lost));
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

MMRT_COMMAND("bench-sandbox", "measure the media sandbox's cost per image against in-process",
             "usage: mmrt bench-sandbox --model DIR --image FILE [--image FILE ...]\n"
             "                          [--iterations N] [--warmup N] [--json FILE]\n\n"
             "Preprocesses each image (decode, resize, normalise, patchify as the checkpoint's\n"
             "processor does) in this process and in a media-sandbox worker, alternately, in\n"
             "the same run; each timing includes one read of every feature, as the encoder\n"
             "does. Prints per image the median and mean time of each, the median of\n"
             "the per-iteration ratios sandbox / in-process with their range, and whether the\n"
             "features are bit-identical (they must be). The weights are not loaded.\n\n"
             "  --iterations N          measured pairs per image (default 20)\n"
             "  --warmup N              pairs run first and not measured (default 3)\n"
             "  --json FILE             write the figures as JSON\n"
             "  --max-image-bytes N     largest image file read (default 64 MiB)\n"
             "  --isa NAME              highest kernel variant for both sides\n"
             "  --media-memory-mb N, --media-cpu-seconds N, --media-timeout S   the worker's "
             "limits\n"
             "                          (as in mmrt generate)\n",
             {"batch-invariant"}, &run);

}  // namespace
}  // namespace mmrt::cli
