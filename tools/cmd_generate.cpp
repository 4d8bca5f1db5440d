// `mmrt generate`: chat-formatted generation (text, images, video and audio) through the engine,
// streamed.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "cli.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model_options.h"
#include "preprocess_video.h"

namespace fs = std::filesystem;

namespace mmrt::cli {
namespace {

// --prompt-file FILE ('-': standard input), for prompts longer than one command-line argument
// may be (128 KiB on Linux).
std::string read_prompt_file(const std::string& path) {
  const io::FileLimit limit{.what = "prompt file", .max_bytes = 64ull << 20};
  return path == "-" ? io::read_stdin(limit) : io::read_file(path, limit);
}

double ms(int64_t ns) {
  return static_cast<double>(ns) * 1e-6;
}

int run_generate(Args& args) {
  engine::EngineConfig cfg;
  cfg.model_dir = args.require("model");
  std::vector<std::string> prompts = args.get_all("prompt");
  for (const auto& f : args.get_all("prompt-file")) prompts.push_back(read_prompt_file(f));
  const std::string sla_class = args.get_or("sla-class", "");
  const double ttft_ms = args.get_double("ttft-deadline-ms", 0.0, 0.0, 3.6e6);
  const std::string sla_file = args.get_or("sla-config", "");
  std::vector<std::string> images = args.get_all("image");
  std::vector<std::string> audios = args.get_all("audio");
  std::vector<std::string> videos = args.get_all("video");
  const models::MediaOptions video_options = video_request_options(args);
  const bool segments = args.flag("video-segments");
  std::string system = args.get_or("system", "");
  bool quiet = args.flag("quiet");
  engine::SamplingParams sp;
  sp.max_tokens = static_cast<int32_t>(args.get_int("max-tokens", 128, 1, 1 << 24));
  sp.temperature = static_cast<float>(args.get_double("temperature", 0.0, 0.0, 100.0));
  sp.top_k = static_cast<int32_t>(args.get_int("top-k", 0, 0, 1 << 24));
  sp.top_p = static_cast<float>(args.get_double("top-p", 1.0, 0.0, 1.0));
  sp.min_p = static_cast<float>(args.get_double("min-p", 0.0, 0.0, 1.0));
  sp.repetition_penalty =
      static_cast<float>(args.get_double("repetition-penalty", 1.0, 0.01, 100.0));
  sp.presence_penalty = static_cast<float>(args.get_double("presence-penalty", 0.0, -2.0, 2.0));
  sp.frequency_penalty = static_cast<float>(args.get_double("frequency-penalty", 0.0, -2.0, 2.0));
  sp.seed = static_cast<uint64_t>(args.get_int("seed", 0, 0, INT64_MAX));
  sp.stop = args.get_all("stop");
  sp.ignore_eos = args.flag("ignore-eos");
  cfg.scheduler.token_budget = step_tokens_option(args);
  const io::FileLimit image_limit = image_file_limit(args);
  const io::FileLimit audio_limit = audio_file_limit(args);
  const io::FileLimit video_limit = video_file_limit(args);
  cfg.policy = args.get_or("policy", "fcfs");
  cfg.model = load_options(args);
  cfg.kv = kv_options(args);
  set_compute(cfg, compute_options(args));
  cfg.media_sandbox = media_sandbox_options(args, cfg.model_dir);
  args.finish();
  const bool has_media = !images.empty() || !audios.empty() || !videos.empty();
  if (!has_media) cfg.media_sandbox.enabled = false;  // nothing to decode: no workers
  // The encoder's cost is measured at load only where admission prices media against a
  // deadline; best-effort runs start at once.
  cfg.calibrate_encoder = has_media && (!sla_class.empty() || ttft_ms > 0);
  if (prompts.empty())
    throw InvalidArgument("give at least one --prompt TEXT or --prompt-file FILE");
  if (!sla_file.empty()) cfg.sla = engine::SlaConfig::load(sla_file);
  if (!sla_class.empty()) cfg.sla.get(sla_class);  // unknown classes: a clear error now
  if (images.size() > prompts.size())
    throw InvalidArgument(
        "more --image options than --prompt options: the i-th --image (a file or a "
        "comma-separated list) goes with the i-th --prompt");
  for (const auto& [opts, name] : {std::pair{&audios, "audio"}, std::pair{&videos, "video"}})
    if (opts->size() > prompts.size())
      throw InvalidArgument(std::string("more --") + name + " options than --prompt options: the " +
                            "i-th --" + name + " (a file or a comma-separated list) goes with " +
                            "the i-th --prompt");
  sp.validate();
  // Every media file is read (bounded, regular files only) before the model loads.
  using Files = std::vector<std::vector<std::vector<uint8_t>>>;
  auto read_all = [](const std::vector<std::string>& opts, const char* option,
                     const io::FileLimit& limit) {
    Files bytes(opts.size());
    for (size_t i = 0; i < opts.size(); ++i)
      for (const auto& path : split_list(opts[i], option))
        bytes[i].push_back(io::read_file_bytes(path, limit));
    return bytes;
  };
  Files image_bytes = read_all(images, "image", image_limit);
  Files audio_bytes = read_all(audios, "audio", audio_limit);
  Files video_bytes = read_all(videos, "video", video_limit);

  auto eng = engine::Engine::create(cfg);
  std::vector<engine::RequestHandle> handles;
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine::GenerateRequest g;
    if (!system.empty()) g.messages.push_back(models::ChatMessage::text("system", system));
    models::ChatMessage user;
    user.role = "user";
    if (i < images.size())
      for (auto& bytes : image_bytes[i]) {
        g.add_image(std::move(bytes));
        user.content.push_back({models::ContentPart::Kind::kImage, ""});
      }
    if (i < videos.size())
      for (auto& bytes : video_bytes[i]) {
        g.media.push_back({models::Modality::kVideo, std::move(bytes), {}, video_options});
        user.content.push_back({models::ContentPart::Kind::kVideo, ""});
        user.content.back().continues = segments && &bytes != &video_bytes[i].front();
      }
    if (i < audios.size())
      for (auto& bytes : audio_bytes[i]) {
        g.media.push_back({models::Modality::kAudio, std::move(bytes), {}});
        user.content.push_back({models::ContentPart::Kind::kAudio, ""});
      }
    user.content.push_back({models::ContentPart::Kind::kText, prompts[i]});
    g.messages.push_back(std::move(user));
    g.sampling = sp;
    // No class, no deadline: a one-shot request is best effort unless asked otherwise.
    g.sla_class = sla_class;
    g.ttft_deadline_ns = static_cast<int64_t>(ttft_ms * 1e6);
    handles.push_back(eng->submit(std::move(g)));
  }
  if (handles.size() == 1) {
    bool wrote = false;
    for (;;) {
      auto ev = handles[0].next();
      if (ev->kind == engine::StreamEvent::Kind::kDone) break;
      std::fwrite(ev->text.data(), 1, ev->text.size(), stdout);
      std::fflush(stdout);
      wrote = wrote || !ev->text.empty();
    }
    if (wrote) std::printf("\n");  // a refused or failed request leaves stdout empty
  }
  int rc = 0;
  for (size_t i = 0; i < handles.size(); ++i) {
    engine::RequestResult r = handles[i].wait();
    if (handles.size() > 1)
      std::printf("--- [%zu] %s\n%s\n", i, engine::outcome_name(r.outcome), r.text.c_str());
    if (r.outcome == engine::Outcome::kFailed || r.outcome == engine::Outcome::kRefused) {
      std::fprintf(stderr, "mmrt generate: request %zu %s: %s\n", i,
                   engine::outcome_name(r.outcome), r.reason.c_str());
      rc = 1;
    }
    if (quiet) continue;
    const auto& tl = r.timeline;
    int64_t t0 = tl.origin(), tf = tl.first(engine::Event::kFirstToken),
            te = tl.last(engine::Event::kFinished), tm = tl.first(engine::Event::kMediaDecoded);
    int64_t n = static_cast<int64_t>(r.tokens.size());
    double prefill_s = tf > 0 ? static_cast<double>(tf - (tm > 0 ? tm : t0)) * 1e-9 : 0;
    // The encoders' share of the time to the first token (jobs that ran, not cache hits).
    int64_t encoder_ns = 0, enc_start = 0;
    for (const auto& e : tl.entries()) {
      if (e.event == engine::Event::kEncoderStart) enc_start = e.t_ns;
      if (e.event == engine::Event::kEncoderEnd && enc_start > 0 && e.value < (int64_t{1} << 32))
        encoder_ns += e.t_ns - enc_start;
    }
    std::string media;
    if (tm > 0) media += ", media " + std::to_string(static_cast<int>(ms(tm - t0))) + " ms";
    if (encoder_ns > 0)
      media += ", encoder " + std::to_string(static_cast<int>(ms(encoder_ns))) + " ms";
    prefill_s = std::max(0.0, prefill_s - static_cast<double>(encoder_ns) * 1e-9);  // the model's
    double decode_s = tf > 0 && te > tf ? static_cast<double>(te - tf) * 1e-9 : 0;
    std::fprintf(
        stderr,
        "[mmrt] request %zu: %s, prompt %lld tokens (%lld from prefix cache)%s, time to first "
        "token "
        "%.1f ms, prefill %.1f tok/s, decode %lld tokens at %.1f tok/s\n",
        i, engine::outcome_name(r.outcome), static_cast<long long>(r.prompt_tokens),
        static_cast<long long>(r.cached_prompt_tokens), media.c_str(), tf > 0 ? ms(tf - t0) : 0.0,
        prefill_s > 0 ? static_cast<double>(r.prompt_tokens - r.cached_prompt_tokens) / prefill_s
                      : 0.0,
        static_cast<long long>(n > 0 ? n - 1 : 0),
        decode_s > 0 ? static_cast<double>(n - 1) / decode_s : 0.0);
  }
  if (!quiet) {
    auto s = eng->stats();
    std::fprintf(stderr,
                 "[mmrt] engine: %lld steps, %lld preemptions, prefix cache %lld/%lld tokens, "
                 "encoder %lld runs\n",
                 static_cast<long long>(s.steps), static_cast<long long>(s.preemptions),
                 static_cast<long long>(s.prefix_hit_tokens),
                 static_cast<long long>(s.prefix_query_tokens),
                 static_cast<long long>(s.encoder_runs));
    if (const std::string c = engine::encoder_calibration_text(s.encoder_calibration); !c.empty())
      std::fprintf(stderr, "[mmrt] %s\n", c.c_str());
    if (eng->backend().records_step_graphs())
      std::fprintf(stderr, "[mmrt] %s\n",
                   engine::step_graphs_text(s.step_graphs, s.step_graph_steps).c_str());
    if (cfg.media_sandbox.enabled)
      std::fprintf(stderr,
                   "[mmrt] media sandbox: %lld items decoded, %lld failed, %lld workers started, "
                   "%lld lost\n",
                   static_cast<long long>(s.media_sandbox.items),
                   static_cast<long long>(s.media_sandbox.failed),
                   static_cast<long long>(s.media_sandbox.workers_started),
                   static_cast<long long>(s.media_sandbox.workers_lost));
  }
  return rc;
}

MMRT_COMMAND(
    "generate",
    "generate text from prompts, images, video and audio (chat template applied), streamed",
    "usage: mmrt generate --model DIR --prompt TEXT [--image FILE[,FILE...]]\n"
    "                     [--video FILE[,FILE...]] [--audio FILE[,FILE...]] [--prompt ... ]\n"
    "                     [options]\n\n"
    "Renders the chat template around each prompt (images first, then videos, then audio, then\n"
    "the text),\n"
    "runs everything through the engine (continuous batching, prefix and encoder caches) and\n"
    "streams the reply to stdout; several --prompt run batched and print when done. The\n"
    "i-th --image / --video / --audio (one file or a comma-separated list) belongs to the i-th\n"
    "--prompt. Video (MP4, MKV, WebM: H.264, VP9, AV1, ...) needs a model that takes it\n"
    "(qwen2-vl): frames are sampled at 2 fps as qwen-vl-utils samples them (docs/video.md).\n"
    "Audio (WAV, FLAC, Ogg Vorbis/Opus, MP3) needs a model that takes it (qwen2-audio);\n"
    "--long-audio says what happens to audio longer than its window.\n"
    "Timings (time to first token, prefill and decode speed) go to stderr.\n\n"
    "prompt:\n"
    "  --prompt-file FILE      read a prompt from FILE ('-': standard input); repeatable,\n"
    "                          after the --prompt options\n"
    "  --system TEXT           system message (default: the template's)\n"
    "sampling:\n"
    "  --max-tokens N          tokens to generate at most (default 128)\n"
    "  --temperature T         0 = greedy (default 0)\n"
    "  --top-k K / --top-p P / --min-p P   filters (defaults off)\n"
    "  --repetition-penalty R  HF-style, over prompt and output (default 1)\n"
    "  --presence-penalty P / --frequency-penalty F   OpenAI-style (default 0)\n"
    "  --seed N                sampling seed (default 0)\n"
    "  --stop TEXT             stop string (repeatable); --ignore-eos keeps going\n"
    "runtime:\n" MMRT_MODEL_OPTIONS_HELP MMRT_SANDBOX_OPTIONS_HELP
    "  --step-tokens N         token budget per engine step (default 512)\n"
    "  --policy fcfs|priority|slo   scheduling policy (default fcfs)\n"
    "latency promise (default none: best effort, never refused for time):\n"
    "  --sla-class NAME        serve in this SLA class (platinum, gold, silver, or one of\n"
    "                          --sla-config): refused up front when it cannot be met\n"
    "  --ttft-deadline-ms MS   first token within MS ms, or refused\n"
    "  --sla-config FILE       SLA classes (JSON, see docs/sla.md)\n"
    "input limits:\n"
    "  --max-image-bytes N     refuse image files larger than N bytes (default 64 MiB)\n"
    "  --max-audio-bytes N     refuse audio files larger than N bytes (default 64 MiB)\n"
    "  --max-video-bytes N     refuse video files larger than N bytes (default 256 MiB)\n"
    "video:\n"
    "  --video-prune-threshold T  the approximate temporal tier (default 0: off): a token\n"
    "                          whose pixels differ from the last kept token at its place by\n"
    "                          less than T 8-bit levels on average is not prefilled\n"
    "  --video-fps F | --video-nframes N   frames sampled per second (default 2), or exactly\n"
    "                          N frames (rounded to even) instead\n"
    "  --video-min-frames N, --video-max-frames N, --video-min-pixels N, --video-max-pixels N,\n"
    "  --video-total-pixels N  qwen-vl-utils' per-video budgets (defaults 4, 768, 100352,\n"
    "                          602112, 19267584); they may be lowered, not raised\n"
    "  --video-segments        the files of each --video list are consecutive segments of one\n"
    "                          clip (a stream cut into files), prompted as one video: each\n"
    "                          continues the one before (the same frame size is needed)\n"
    "  --quiet                 no timing lines\n",
    {"ignore-eos", "quiet", "map-weights", "video-segments", "batch-invariant"}, run_generate);

}  // namespace
}  // namespace mmrt::cli
