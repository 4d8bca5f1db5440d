// `mmrt bench-model`'s audio section (see bench_audio_encoder.h).
#include "bench_audio_encoder.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "bench_workload.h"
#include "cli.h"
#include "core/clock.h"
#include "core/error.h"
#include "media/image.h"
#include "obs/report.h"

namespace mmrt::cli {
namespace {

struct Timing {
  double median_s = 0, min_s = 0;
  int reps = 0;
};

// `fn` once to warm up, then repeated: enough repetitions for about `budget_s` of work, at least
// 3 and at most 15 (3 for anything that takes a second or more), median and min.
Timing time_repeated(const std::function<void()>& fn, double budget_s, const char* what,
                     double clip_s) {
  Stopwatch warm;
  fn();
  const double tw = warm.seconds();
  const int reps = static_cast<int>(std::clamp(budget_s / std::max(tw, 1e-6), 3.0, 15.0));
  const bool slow = tw >= 1.0;  // progress per repetition for long work
  if (slow)
    std::fprintf(stderr, "bench-model: %s, %.1f s clip: warm-up %.2f s, %d repetitions\n", what,
                 clip_s, tw, reps);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    Stopwatch sw;
    fn();
    t.push_back(sw.seconds());
    if (slow)
      std::fprintf(stderr, "bench-model: %s, %.1f s clip: %d/%d %.2f s\n", what, clip_s, i + 1,
                   reps, t.back());
  }
  return {obs::median(t), *std::min_element(t.begin(), t.end()), reps};
}

// synthetic_wav's 16 kHz clip relabelled as `rate` Hz, `seconds` long (the same glide and noise,
// pitched up): the processor resamples it to 16 kHz.
std::vector<uint8_t> wav_at_rate(double seconds, uint32_t rate) {
  std::vector<uint8_t> w = synthetic_wav(seconds * rate / 16000.0, 7);
  auto put = [&](size_t at, uint32_t v) {
    for (size_t i = 0; i < 4; ++i) w[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  put(24, rate);      // sample rate
  put(28, 2 * rate);  // byte rate (mono PCM16)
  return w;
}

struct ClipFigures {
  double seconds = 0;
  Timing pre, pre_resampled, enc;
  double flops = 0;
  int64_t tokens = 0, cost = 0;
};

}  // namespace

std::vector<double> parse_audio_seconds(const std::string& value) {
  if (value == "0") return {};
  std::vector<double> out;
  for (const std::string& s : split_list(value, "audio-seconds")) {
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v) || v <= 0 || v > 3600)
      throw InvalidArgument(
          "--audio-seconds: each entry must be a number of seconds in (0, 3600] "
          "(or the list '0' to skip), got '" +
          s.substr(0, 32) + "'");
    out.push_back(v);
  }
  return out;
}

void bench_audio_encoder(const kernels::Backend& be, const media::HostContext& host,
                         models::Model& model, const std::vector<double>& seconds) {
  const models::ModelSpec& spec = model.spec;
  std::printf(
      "== audio encoder on synthetic mono PCM16 WAV clips (preprocessing = decode + resample + "
      "log-mel, on one thread, of a 16 kHz clip (no resampling) and of the same length at "
      "44.1 kHz; the encoder on the backend's threads; warm-up once, then the median)\n");
  // The encoder's figures hold for the checkpoint's tower; say when its language model is a
  // stand-in (make-tiny-model --size tower-7b-shape: the real 7B tower on a small LLM).
  const bool qwen2_audio = spec.family == "qwen2-audio";
  const bool small_lm = qwen2_audio && (spec.embed_dim != 4096 || spec.kv_layers.size() != 32);
  std::printf("   language model: hidden %lld, %zu layers%s\n",
              static_cast<long long>(spec.embed_dim), spec.kv_layers.size(),
              small_lm ? " -- NOT Qwen2-Audio-7B's (4096 x 32 layers): the language-model "
                         "figures above are not the 7B's; the projector outputs this hidden size"
                       : "");
  const media::MediaContext mctx = host.media_context();
  std::vector<ClipFigures> clips;
  for (double s : seconds) {
    const std::vector<uint8_t> wav = synthetic_wav(s, 7);
    ClipFigures c;
    c.seconds = s;
    models::PreparedMedia item;
    c.pre = time_repeated(
        [&] { item = model.processor->preprocess(models::Modality::kAudio, wav, mctx); }, 1.0,
        "audio preprocessing", s);
    const std::vector<uint8_t> wav44 = wav_at_rate(s, 44100);
    c.pre_resampled = time_repeated(
        [&] { (void)model.processor->preprocess(models::Modality::kAudio, wav44, mctx); }, 1.0,
        "audio preprocessing at 44.1 kHz", s);
    c.tokens = item.n_tokens;
    c.cost = item.encoder_cost;
    c.flops = model.runner->encode_flops(item);
    Tensor rows;
    c.enc = time_repeated(
        [&] {
          rows = model.runner->encode(item);
          be.synchronize();  // a device's queued work counts
        },
        3.0, "audio encoder", s);
    if (rows.rank() != 2 || rows.dim(0) != item.n_tokens)
      throw InternalError("bench-model: the encoder gave " + rows.describe() + " for " +
                          std::to_string(item.n_tokens) + " tokens");
    std::printf(
        "   %5.1f s clip: preprocess %6.2f ms (median of %d, min %.2f; from 44.1 kHz %.2f ms) | "
        "encoder %9.1f ms (median "
        "of %d, min %.1f), %.4g GFLOP = %.1f GFLOP/s | %lld tokens (%.2f ms each)\n",
        s, c.pre.median_s * 1e3, c.pre.reps, c.pre.min_s * 1e3, c.pre_resampled.median_s * 1e3,
        c.enc.median_s * 1e3, c.enc.reps, c.enc.min_s * 1e3, c.flops / 1e9,
        c.enc.median_s > 0 ? c.flops / c.enc.median_s / 1e9 : 0, static_cast<long long>(c.tokens),
        c.tokens > 0 ? c.enc.median_s * 1e3 / static_cast<double>(c.tokens) : 0.0);
    std::fflush(stdout);
    clips.push_back(c);
  }
  if (clips.size() < 2) return;
  // The longest clip against the shortest: the tower computes only the valid rows, so a short
  // clip costs its share of the window, not the whole window.
  const auto [lo, hi] = std::minmax_element(
      clips.begin(), clips.end(),
      [](const ClipFigures& a, const ClipFigures& b) { return a.seconds < b.seconds; });
  if (lo->seconds == hi->seconds || lo->enc.median_s <= 0 || lo->tokens == 0) return;
  std::printf(
      "   %g s vs %g s: encoder time %.2fx (median over median) for %.2fx the tokens and "
      "%.2fx the FLOPs; preprocessing %.2fx\n",
      hi->seconds, lo->seconds, hi->enc.median_s / lo->enc.median_s,
      static_cast<double>(hi->tokens) / static_cast<double>(lo->tokens),
      lo->flops > 0 ? hi->flops / lo->flops : 0.0, hi->pre.median_s / lo->pre.median_s);
}

}  // namespace mmrt::cli
