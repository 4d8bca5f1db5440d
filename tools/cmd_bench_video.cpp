// `mmrt bench-video`: what the temporal tiers save and what the approximate tier costs, per clip,
// in one run: preprocessing (one thread), the vision tower and the LLM prefill of a one-video
// prompt with no temporal reuse, with the exact tier, and with the approximate tier at each
// threshold of a sweep; for the approximate tier the next-token distributions against the exact
// tier's (KL divergence, greedy agreement, teacher-forced over a few tokens).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench_lm.h"
#include "cli.h"
#include "core/clock.h"
#include "core/error.h"
#include "io/file.h"
#include "io/tokenizer.h"
#include "logprobs.h"
#include "media/image.h"
#include "model_options.h"
#include "obs/report.h"

namespace mmrt::cli {
namespace {

using obs::median;

// One way of serving the clip: the exact tier on or off, the approximate tier's threshold.
struct Variant {
  std::string name;
  bool reuse = true;     // LoadOptions::video_slice_reuse
  double threshold = 0;  // MediaOptions::video_prune_threshold
  std::vector<double> preprocess_ms, encoder_ms, prefill_ms, ttft_ms;
  int64_t prompt_tokens = 0, video_tokens = 0, encoder_patches = 0;
  std::vector<std::vector<double>> logprobs;  // teacher-forced positions, log-softmax
};

std::vector<double> parse_list(const std::string& s, const std::string& what) {
  std::vector<double> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double x = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(x) || x <= 0 || x > 255)
      throw InvalidArgument("--" + what + ": '" + item + "' is not a threshold in (0, 255]");
    v.push_back(x);
  }
  if (v.empty()) throw InvalidArgument("--" + what + " is empty");
  return v;
}

class ClipBench {
 public:
  ClipBench(Lm& lm, models::Runner& no_reuse, const io::Tokenizer& tok,
            const media::HostContext& host, int32_t step_tokens, int forced)
      : lm_(lm), no_reuse_(no_reuse), tok_(tok), host_(host), step_(step_tokens), forced_(forced) {}

  // One timed pass of `v` over the clip; with `keep_logits` also the teacher-forced positions
  // (their inputs: `forced_tokens`, the reference's greedy continuation; empty: this variant's).
  void run(Variant& v, const std::vector<uint8_t>& clip, bool keep_logits,
           std::vector<int32_t>* forced_tokens) {
    const models::Processor& proc = lm_.processor();
    models::MediaOptions opt;
    opt.video_prune_threshold = v.threshold;
    media::MediaContext ctx;
    ctx.isa = host_.isa();
    Stopwatch sw;
    const models::PreparedMedia item = proc.preprocess(models::Modality::kVideo, clip, ctx, opt);
    const double pre_ms = sw.millis();
    sw.reset();
    const Tensor feats = (v.reuse ? lm_.runner() : no_reuse_).encode(item);
    const double enc_ms = sw.millis();

    models::ChatMessage user;
    user.role = "user";
    user.content = {{models::ContentPart::Kind::kVideo, ""},
                    {models::ContentPart::Kind::kText, "What moves in this video, and where?"}};
    const std::vector<int32_t> ids = proc.chat_ids(tok_, {user}, true);
    const models::ExpandedPrompt p = proc.expand(ids, {&item, 1});
    const int64_t S = static_cast<int64_t>(p.ids.size());
    if (S + forced_ + 1 > lm_.kv_tokens())
      throw ResourceExhausted("the prompt has " + std::to_string(S) + " tokens and the KV cache " +
                              std::to_string(lm_.kv_tokens()) + ": raise --kv-mb");
    const std::vector<int32_t> table = lm_.block_table(0, S + forced_ + 1);
    const int64_t begin = p.spans.at(0).begin;
    std::vector<int32_t> media_rows(static_cast<size_t>(item.n_tokens));
    for (int64_t r = 0; r < item.n_tokens; ++r)
      media_rows[static_cast<size_t>(r)] = static_cast<int32_t>(begin + r);
    const int rows_per_pos = static_cast<int>(p.positions.size() / static_cast<size_t>(S));
    sw.reset();
    Tensor logits = lm_.prefill({.ids = p.ids,
                                 .positions = p.positions,
                                 .position_rows = rows_per_pos,
                                 .media_rows = media_rows,
                                 .media = &feats},
                                step_, table);
    const double prefill_ms = sw.millis();
    v.preprocess_ms.push_back(pre_ms);
    v.encoder_ms.push_back(enc_ms);
    v.prefill_ms.push_back(prefill_ms);
    v.ttft_ms.push_back(pre_ms + enc_ms + prefill_ms);
    v.prompt_tokens = S;
    v.video_tokens = item.n_tokens;
    v.encoder_patches = item.encoder_cost;
    if (!keep_logits) return;

    // Teacher-forced: the same input tokens for every variant, this variant's distributions.
    const int64_t V = logits.dim(1);
    v.logprobs.clear();
    v.logprobs.push_back(log_softmax(logits.data<float>(), V));
    const bool own = forced_tokens->empty();
    for (int k = 0; k < forced_; ++k) {
      if (own) forced_tokens->push_back(static_cast<int32_t>(argmax(v.logprobs.back())));
      const int32_t t = (*forced_tokens)[static_cast<size_t>(k)];
      logits = lm_.decode(t, S + k, p.rope_delta, table);
      v.logprobs.push_back(log_softmax(logits.data<float>(), V));
    }
  }

 private:
  Lm& lm_;
  models::Runner& no_reuse_;
  const io::Tokenizer& tok_;
  const media::HostContext& host_;
  int32_t step_;
  int forced_;
};

int run_bench_video(Args& args) {
  const std::string dir = args.require("model");
  std::vector<std::string> paths;
  for (const std::string& a : args.get_all("video")) {
    std::stringstream ss(a);
    std::string p;
    while (std::getline(ss, p, ','))
      if (!p.empty()) paths.push_back(p);
  }
  if (paths.empty()) throw InvalidArgument("give at least one --video FILE");
  const double chosen = args.get_double("threshold", 2.0, 1e-6, 255.0);
  std::vector<double> sweep = parse_list(args.get_or("sweep", "0.5,1,2,4,8,16"), "sweep");
  if (std::find(sweep.begin(), sweep.end(), chosen) == sweep.end()) sweep.push_back(chosen);
  std::sort(sweep.begin(), sweep.end());
  const int repeat = static_cast<int>(args.get_int("repeat", 3, 1, 1000));
  const int forced = static_cast<int>(args.get_int("forced-tokens", 8, 0, 4096));
  const int32_t step_tokens = step_tokens_option(args);
  const std::string json_path = args.get_or("json", "");
  const io::FileLimit limit = video_file_limit(args);
  const models::LoadOptions base = load_options(args);
  engine::KvOptions kvo = kv_options(args);
  const ComputeOptions co = compute_options(args);
  args.finish();
  if (!json_path.empty() && !std::ofstream(json_path, std::ios::app))
    throw InvalidArgument("cannot write --json file '" + json_path + "'");

  const std::unique_ptr<kernels::Backend> bep = make_backend(co);
  const kernels::Backend& be = *bep;
  const media::HostContext host(co.host);
  std::fprintf(stderr, "[bench-video] loading %s twice (exact tier on and off)\n", dir.c_str());
  std::unique_ptr<Lm> lm = load_lm(be, dir, base, kvo);
  models::LoadOptions off = base;
  off.video_slice_reuse = false;
  kvo.bytes = 0;  // its KV cache is never used: the smallest
  std::unique_ptr<Lm> lm_off = load_lm(be, dir, off, kvo);
  const io::Tokenizer tok = io::Tokenizer::from_file(dir + "/tokenizer.json");
  ClipBench bench(*lm, lm_off->runner(), tok, host, step_tokens, forced);
  std::printf(
      "== machine: %s; %d repetitions (interleaved), medians; preprocessing on one "
      "thread, the model on %s\n",
      be.describe().c_str(), repeat, be.describe().c_str());

  nlohmann::json out = nlohmann::json::array();
  for (const std::string& path : paths) {
    const std::vector<uint8_t> clip = io::read_file_bytes(path, limit);
    std::vector<Variant> vs;
    vs.push_back({"none", false, 0});
    vs.push_back({"exact", true, 0});
    for (double t : sweep) {
      char name[32];
      std::snprintf(name, sizeof name, "approx %g%s", t, t == chosen ? "*" : "");
      vs.push_back({name, true, t});
    }
    std::fprintf(stderr, "[bench-video] %s: %zu variants x %d\n", path.c_str(), vs.size(),
                 repeat + 1);
    // The exact tier first, untimed: the reference distributions and the forced tokens.
    std::vector<int32_t> forced_tokens;
    std::vector<size_t> order{1, 0};
    for (size_t i = 2; i < vs.size(); ++i) order.push_back(i);
    for (size_t i : order) {
      Variant& v = vs[i];
      Variant warm = v;
      bench.run(warm, clip, true, &forced_tokens);
      v.logprobs = std::move(warm.logprobs);
    }
    for (int rep = 0; rep < repeat; ++rep)
      for (size_t i = 0; i < vs.size(); ++i) {
        Variant& v = vs[(i + static_cast<size_t>(rep)) % vs.size()];  // rotate the order
        bench.run(v, clip, false, nullptr);
      }
    const Variant& none = vs[0];
    const Variant& exact = vs[1];
    const double none_enc = median(none.encoder_ms), none_pre = median(none.prefill_ms),
                 none_ttft = median(none.ttft_ms);
    // How decided the reference is: a random checkpoint's distributions are nearly flat, and
    // greedy agreement means little where the first two tokens are close.
    double top = 0, margin = 0;
    for (const std::vector<double>& lp : exact.logprobs) {
      std::vector<double> v = lp;
      std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
      top += std::exp(v[0]);
      margin += v[0] - v[1];
    }
    top /= static_cast<double>(exact.logprobs.size());
    margin /= static_cast<double>(exact.logprobs.size());
    std::printf(
        "\n== %s: %lld video tokens unpruned, prompt %lld tokens; the exact tier's top token: "
        "p %.3f, %.3f nats above the second (means)\n",
        path.c_str(), static_cast<long long>(exact.video_tokens),
        static_cast<long long>(exact.prompt_tokens), top, margin);
    std::printf("%-12s %8s %8s %9s %9s %9s %9s %9s %8s %8s %8s\n", "tier", "tokens", "kept",
                "prep ms", "enc ms", "enc/none", "prefill", "pf/none", "ttft ms", "KL mean",
                "greedy");
    nlohmann::json clip_json = {{"video", path},
                                {"exact_top_p", top},
                                {"exact_top_margin", margin},
                                {"variants", nlohmann::json::array()}};
    for (const Variant& v : vs) {
      double kl_sum = 0, kl_max = 0;
      int agree = 0;
      for (size_t k = 0; k < v.logprobs.size(); ++k) {
        const double d = kl(exact.logprobs[k], v.logprobs[k]);
        kl_sum += d;
        kl_max = std::max(kl_max, d);
        agree += argmax(exact.logprobs[k]) == argmax(v.logprobs[k]);
      }
      const double n = static_cast<double>(v.logprobs.size());
      const double enc = median(v.encoder_ms), pf = median(v.prefill_ms), ttft = median(v.ttft_ms);
      std::printf(
          "%-12s %8lld %7.1f%% %9.2f %9.2f %8.2fx %9.2f %8.2fx %8.1f %8.2g %4d/%-3d\n",
          v.name.c_str(), static_cast<long long>(v.video_tokens),
          100.0 * static_cast<double>(v.video_tokens) / static_cast<double>(exact.video_tokens),
          median(v.preprocess_ms), enc, enc / none_enc, pf, pf / none_pre, ttft, kl_sum / n, agree,
          static_cast<int>(n));
      clip_json["variants"].push_back({{"tier", v.name},
                                       {"chosen", v.threshold > 0 && v.threshold == chosen},
                                       {"threshold", v.threshold},
                                       {"slice_reuse", v.reuse},
                                       {"video_tokens", v.video_tokens},
                                       {"prompt_tokens", v.prompt_tokens},
                                       {"encoder_patches", v.encoder_patches},
                                       {"preprocess_ms", median(v.preprocess_ms)},
                                       {"encoder_ms", enc},
                                       {"prefill_ms", pf},
                                       {"ttft_ms", ttft},
                                       {"encoder_vs_none", enc / none_enc},
                                       {"prefill_vs_none", pf / none_pre},
                                       {"ttft_vs_none", ttft / none_ttft},
                                       {"kl_mean", kl_sum / n},
                                       {"kl_max", kl_max},
                                       {"greedy_agree", agree},
                                       {"positions", static_cast<int>(n)}});
    }
    out.push_back(clip_json);
  }
  std::printf(
      "\n*: --threshold, the chosen default. prep: decode + sample + resize + patchify (one "
      "thread); enc: the vision tower; "
      "prefill: the\nLLM over the whole prompt in chunks of %d; ttft: their sum for one "
      "request alone; x/none:\nover no temporal reuse, same run. KL (nats) and greedy: the "
      "next-token distribution against\nthe exact tier's at the prompt's end and %d "
      "teacher-forced tokens after it.\n",
      step_tokens, forced);
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << out.dump(1) << "\n";
  }
  return 0;
}

}  // namespace

MMRT_COMMAND(
    "bench-video", "temporal reuse and pruning of video: time saved, distributions changed",
    "usage: mmrt bench-video --model DIR --video FILE[,FILE...] [--threshold T] [--sweep LIST]\n"
    "                        [--repeat N] [--forced-tokens N] [--json FILE] [options]\n\n"
    "For each clip, a one-video prompt is preprocessed (one thread), encoded by the vision\n"
    "tower and prefilled by the LLM, directly on the runner (no engine), with:\n"
    "  none          every slice encoded (the exact tier off); frames equal to an earlier one\n"
    "                are still not resized again\n"
    "  exact         slices bit-identical to an earlier slice reuse its encoder output\n"
    "  approx T      the approximate tier at threshold T (8-bit levels, docs/video.md): tokens\n"
    "                that barely change are not prefilled, for each T of --sweep\n"
    "Times are medians of --repeat interleaved runs, with ratios to none from the same run. The\n"
    "approximate tier's cost is the KL divergence of the next-token distribution from the exact\n"
    "tier's and how often the greedy token agrees, at the prompt's end and for --forced-tokens\n"
    "tokens after it (every variant is fed the exact tier's greedy tokens).\n\n"
    "  --video FILE[,FILE]     the clips (repeatable)\n"
    "  --threshold T           the chosen default, marked * (default 2; added to the sweep)\n"
    "  --sweep LIST            thresholds (default 0.5,1,2,4,8,16)\n"
    "  --repeat N              timed runs per variant (default 3)\n"
    "  --forced-tokens N       teacher-forced positions after the prompt (default 8)\n"
    "  --step-tokens N         prefill chunk (default 512)\n"
    "  --max-video-bytes N     refuse larger files (default 256 MiB)\n"
    "  --json FILE             also write the figures as JSON\n" MMRT_MODEL_OPTIONS_HELP,
    {"map-weights", "batch-invariant"}, run_bench_video);

}  // namespace mmrt::cli
