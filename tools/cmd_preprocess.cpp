// `mmrt preprocess`: one image file -> the checkpoint family's encoder input as .npy (Qwen2-VL:
// pixel_values / grid_thw with the resized size, token count and time per stage; LLaVA, Fuyu:
// their processor's features, dims and token count, through the registry), optionally repeated
// for benchmarking; one video -> Qwen2-VL's pixel_values_videos; or one audio file -> Qwen2-Audio
// input_features / feature_attention_mask .npy files, with the windows, mel frames, token count
// and time.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/npy.h"
#include "media/audio.h"
#include "media/image.h"
#include "model_options.h"
#include "models/qwen2_audio/config.h"
#include "models/qwen2_audio/feature_extractor.h"
#include "models/qwen2_audio/processor.h"
#include "models/qwen2_vl/image_processor.h"
#include "models/registry.h"
#include "preprocess_video.h"

namespace mmrt::cli {
namespace {

namespace fs = std::filesystem;
using namespace mmrt::media;
using namespace mmrt::models::qwen2_vl;
using io::write_npy;

ImageProcessorConfig load_config(const std::string& model) {
  fs::path p(model);
  std::error_code ec;
  if (!fs::exists(p, ec))
    throw NotFound("--model " + model +
                   ": no such folder (expected a folder holding preprocessor_config.json)");
  if (fs::is_directory(p, ec)) p /= "preprocessor_config.json";
  return ImageProcessorConfig::load(p.string());
}

struct Stages {
  std::vector<double> decode, resize, patchify, total, cpu;
};

// CPU time of the whole process (all threads), in ms.
double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double best(const std::vector<double>& v) {
  return *std::min_element(v.begin(), v.end());
}

// `repeat` runs of the processor on one file (buffers reused between runs, as the engine's media
// workers reuse theirs): the last item and every run's time in ms.
models::PreparedMedia timed_preprocess(const models::Processor& processor, models::Modality m,
                                       const std::vector<uint8_t>& bytes, MediaContext& ctx,
                                       int64_t repeat, std::vector<double>& ms) {
  models::PreparedMedia item;
  for (int64_t i = 0; i < repeat; ++i) {
    Stopwatch sw;
    item = processor.preprocess(m, bytes, ctx);
    ms.push_back(sw.millis());
  }
  return item;
}

// --audio: the Qwen2-Audio processor of the checkpoint in `model` (config.json and
// preprocessor_config.json), as `mmrt generate` / `serve` preprocess it.
int run_audio(Args& args, const std::string& model, const std::string& audio) {
  namespace qa = models::qwen2_audio;
  const auto out = args.get("out");
  const int64_t threads = args.get_int("threads", 1, 1, max_threads());
  const int64_t repeat = args.get_int("repeat", 1, 1, 1'000'000);
  const io::FileLimit limit = audio_file_limit(args);
  const models::LoadOptions::LongAudio long_audio = long_audio_option(args);
  const bool json = args.flag("json");
  args.finish();

  std::error_code ec;
  if (!fs::is_directory(model, ec))
    throw NotFound("--model " + model +
                   ": no such folder (expected a qwen2-audio checkpoint folder holding "
                   "config.json and preprocessor_config.json)");
  if (const models::ModelFamily& fam = models::family_for_checkpoint(model);
      std::string(fam.name) != "qwen2-audio")
    throw InvalidArgument("--model " + model + " is a " + fam.name +
                          " checkpoint, which takes no audio: --audio needs a qwen2-audio one");
  const std::string config_path = (fs::path(model) / "config.json").string();
  const std::string pp_path = (fs::path(model) / "preprocessor_config.json").string();
  const qa::Config cfg = qa::load_config(config_path);
  cfg.validate(config_path);
  const qa::FeatureExtractorConfig fe = qa::FeatureExtractorConfig::load(pp_path);
  fe.check_against(cfg.audio, pp_path);
  const auto processor = qa::make_processor(cfg, fe, Hash128{}, long_audio);

  const std::vector<uint8_t> bytes = io::read_file_bytes(audio, limit);
  const AudioInfo info = probe_audio(bytes);
  MediaContext ctx;
  ctx.buffers = BufferCache::create();  // repeated runs reuse their buffers
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1) {
    pool = std::make_unique<ThreadPool>(static_cast<int>(threads));
    ctx.pool = pool.get();
  }
  std::vector<double> total;
  const models::PreparedMedia item =
      timed_preprocess(*processor, models::Modality::kAudio, bytes, ctx, repeat, total);
  const std::vector<int64_t> frames = qa::window_frames(item, cfg.audio);
  const int64_t W = item.features.dim(0), T = item.features.dim(2);
  int64_t valid = 0;
  std::string per_window;
  for (const int64_t f : frames) {
    valid += f;
    per_window += (per_window.empty() ? "" : ", ") + std::to_string(f);
  }
  if (json) {
    std::printf(
        "{\"audio\": \"%s\", \"format\": \"%s\", \"sample_rate\": %d, \"channels\": %d, "
        "\"seconds\": %.6f, \"windows\": %lld, \"mel_bins\": %lld, \"frames_per_window\": %lld, "
        "\"valid_frames\": [%s], \"tokens\": %lld, \"repeat\": %lld, \"best_ms\": %.4f, "
        "\"median_ms\": %.4f}\n",
        fs::path(audio).filename().string().c_str(),
        std::string(audio_format_name(info.format)).c_str(), info.sample_rate, info.channels,
        info.seconds(), static_cast<long long>(W), static_cast<long long>(item.features.dim(1)),
        static_cast<long long>(T), per_window.c_str(), static_cast<long long>(item.n_tokens),
        static_cast<long long>(repeat), best(total), median(total));
  } else {
    std::printf(
        "audio     %s: %s %.*s %d Hz %d ch, %.2f s, %zu bytes -> %lld window(s) of %lld mels x "
        "%lld frames, %lld valid mel frames (%s), %lld tokens, %s %.2f ms\n",
        audio.c_str(), std::string(audio_format_name(info.format)).c_str(),
        static_cast<int>(info.codec.size()), info.codec.data(), info.sample_rate, info.channels,
        info.seconds(), bytes.size(), static_cast<long long>(W),
        static_cast<long long>(item.features.dim(1)), static_cast<long long>(T),
        static_cast<long long>(valid), per_window.c_str(), static_cast<long long>(item.n_tokens),
        repeat > 1 ? "best" : "time", best(total));
  }
  if (out) {
    // HF's Qwen2AudioProcessor outputs: input_features and feature_attention_mask (int32).
    Tensor mask = Tensor::zeros(DType::kI32, {W, T});  // [n_windows, n_frames]
    for (int64_t k = 0; k < W; ++k)
      std::fill_n(mask.data<int32_t>() + k * T, frames[static_cast<size_t>(k)], 1);
    const std::string fp = *out + ".input_features.npy", mp = *out + ".feature_attention_mask.npy";
    write_npy(fp, item.features);
    write_npy(mp, mask);
    if (!json)
      std::printf("wrote     %s (float32 %s), %s (int32 %s)\n", fp.c_str(),
                  shape_str(item.features.shape()).c_str(), mp.c_str(),
                  shape_str(mask.shape()).c_str());
  }
  return 0;
}

// --image for a family other than Qwen2-VL (whose path above reports its stages): the family's
// own processor from the registry, as `mmrt generate` / `serve` preprocess the image.
int run_family_image(Args& args, const std::string& model, const models::ModelFamily& fam,
                     const std::string& image) {
  const auto out = args.get("out");
  const int64_t repeat = args.get_int("repeat", 1, 1, 1'000'000);
  const io::FileLimit limit = image_file_limit(args);
  const bool json = args.flag("json");
  args.finish();
  const std::unique_ptr<models::Processor> processor = fam.load_processor(model);
  const std::vector<uint8_t> bytes = io::read_file_bytes(image, limit);
  MediaContext ctx;
  ctx.buffers = BufferCache::create();  // repeated runs reuse their buffers
  std::vector<double> total;
  const models::PreparedMedia item =
      timed_preprocess(*processor, models::Modality::kImage, bytes, ctx, repeat, total);
  std::string dims;
  for (int64_t d : item.dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  if (json) {
    std::printf(
        "{\"image\": \"%s\", \"family\": \"%s\", \"features\": \"%s\", \"dims\": [%s], "
        "\"tokens\": %lld, \"encoder_cost\": %lld, \"repeat\": %lld, \"best_ms\": %.4f, "
        "\"median_ms\": %.4f}\n",
        fs::path(image).filename().string().c_str(), fam.name, item.features.describe().c_str(),
        dims.c_str(), static_cast<long long>(item.n_tokens),
        static_cast<long long>(item.encoder_cost), static_cast<long long>(repeat), best(total),
        median(total));
  } else {
    std::printf("image     %s, %zu bytes, %s processor\n", image.c_str(), bytes.size(), fam.name);
    std::printf("features  %s, dims [%s], %lld tokens, encoder cost %lld, %s %.2f ms\n",
                item.features.describe().c_str(), dims.c_str(),
                static_cast<long long>(item.n_tokens), static_cast<long long>(item.encoder_cost),
                repeat > 1 ? "best" : "time", best(total));
  }
  if (out) {
    const std::string fp = *out + ".pixel_values.npy";
    write_npy(fp, item.features);
    if (!json)
      std::printf("wrote     %s (float32 %s)\n", fp.c_str(),
                  shape_str(item.features.shape()).c_str());
  }
  return 0;
}

int run_preprocess(Args& args) {
  const std::string model = args.require("model");
  const auto image_opt = args.get("image"), audio_opt = args.get("audio"),
             video_opt = args.get("video");
  if (image_opt.has_value() + audio_opt.has_value() + video_opt.has_value() != 1)
    throw InvalidArgument("give exactly one of --image, --video or --audio (one media file)");
  if (audio_opt) return run_audio(args, model, *audio_opt);
  // A checkpoint folder picks its family's processor; a bare preprocessor_config.json is
  // Qwen2-VL's (the form this command first took).
  std::error_code ec;
  const models::ModelFamily* fam =
      fs::is_directory(model, ec) && fs::exists(fs::path(model) / "config.json", ec)
          ? &models::family_for_checkpoint(model)
          : nullptr;
  const bool qwen2_vl = !fam || std::string(fam->name) == "qwen2-vl";
  if (video_opt) {
    if (!qwen2_vl)
      throw InvalidArgument("--model " + model + " is a " + fam->name +
                            " checkpoint, which takes no video: --video needs a qwen2-vl one");
    return run_preprocess_video(args, load_config(model), *video_opt);
  }
  if (!qwen2_vl) return run_family_image(args, model, *fam, *image_opt);
  const std::string image = *image_opt;
  const std::string mode_s = args.get_or("mode", "reference");
  const auto out = args.get("out");
  const int64_t threads = args.get_int("threads", 1, 1, max_threads());
  const int64_t repeat = args.get_int("repeat", 1, 1, 1'000'000);
  const auto size = args.get("size");
  const int64_t max_src = max_source_pixels_option(args);
  const io::FileLimit image_limit = image_file_limit(args);
  const bool json = args.flag("json");
  args.finish();

  if (mode_s != "reference" && mode_s != "fast")
    throw InvalidArgument("--mode must be reference or fast, got '" + mode_s + "'");
  PreprocessOptions opts;
  opts.mode = mode_s == "fast" ? PreprocessMode::kFast : PreprocessMode::kReference;
  opts.max_source_pixels = static_cast<uint64_t>(max_src);
  if (size) {
    int w = 0, h = 0;
    char x = 0;
    if (std::sscanf(size->c_str(), "%d%c%d", &w, &x, &h) != 3 || x != 'x')
      throw InvalidArgument("--size must look like 448x448, got '" + *size + "'");
    opts.target_width = w;
    opts.target_height = h;
  }
  // Repeated runs reuse their buffers, as the engine's media workers do.
  opts.ctx.buffers = BufferCache::create();
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1) {
    pool = std::make_unique<ThreadPool>(static_cast<int>(threads));
    opts.ctx.pool = pool.get();
  }

  const ImageProcessorConfig cfg = load_config(model);
  const std::vector<uint8_t> bytes = io::read_file_bytes(image, image_limit);
  const ImageInfo info = probe_image(bytes, {.max_pixels = opts.max_source_pixels});

  ImageInputs r;
  Stages st;
  for (int64_t i = 0; i < repeat; ++i) {
    Stopwatch sw;
    const double cpu0 = process_cpu_ms();
    r = preprocess_image(bytes, cfg, opts);
    st.total.push_back(sw.millis());
    st.cpu.push_back(process_cpu_ms() - cpu0);
    st.decode.push_back(r.decode_ms);
    st.resize.push_back(r.resize_ms);
    st.patchify.push_back(r.patchify_ms);
  }

  if (json) {
    std::printf(
        "{\"image\": \"%s\", \"mode\": \"%s\", \"source\": [%d, %d], \"decoded\": [%d, %d], "
        "\"resized\": [%d, %d], \"grid_thw\": [%lld, %lld, %lld], \"tokens\": %lld, "
        "\"repeat\": %lld, \"best_ms\": {\"decode\": %.4f, \"resize\": %.4f, \"patchify\": %.4f, "
        "\"total\": %.4f, \"cpu\": %.4f}, \"median_ms\": {\"decode\": %.4f, \"resize\": %.4f, "
        "\"patchify\": %.4f, \"total\": %.4f, \"cpu\": %.4f}}\n",
        fs::path(image).filename().string().c_str(), mode_s.c_str(), r.source_width,
        r.source_height, r.decoded_width, r.decoded_height, r.resized_width, r.resized_height,
        static_cast<long long>(r.grid_t), static_cast<long long>(r.grid_h),
        static_cast<long long>(r.grid_w), static_cast<long long>(r.n_tokens()),
        static_cast<long long>(repeat), best(st.decode), best(st.resize), best(st.patchify),
        best(st.total), best(st.cpu), median(st.decode), median(st.resize), median(st.patchify),
        median(st.total), median(st.cpu));
  } else {
    std::printf("image     %s: %s %dx%d %.*s, %zu bytes\n", image.c_str(),
                std::string(format_name(info.format)).c_str(), info.width, info.height,
                static_cast<int>(info.color.size()), info.color.data(), bytes.size());
    std::printf("mode      %s", mode_s.c_str());
    if (r.jpeg_scale_denom > 1)
      std::printf(" (JPEG decoded at 1/%d scale: %dx%d)", r.jpeg_scale_denom, r.decoded_width,
                  r.decoded_height);
    std::printf(", %lld thread(s)\n", static_cast<long long>(threads));
    std::printf("resized   %dx%d (%s) -> grid_thw [%lld, %lld, %lld], %lld patches, %lld tokens\n",
                r.resized_width, r.resized_height, std::string(filter_name(cfg.resample)).c_str(),
                static_cast<long long>(r.grid_t), static_cast<long long>(r.grid_h),
                static_cast<long long>(r.grid_w), static_cast<long long>(r.pixel_values.dim(0)),
                static_cast<long long>(r.n_tokens()));
    const char* what = repeat > 1 ? "best" : "time";
    std::printf(
        "%-9s decode+h-resize %.2f ms | v-resize %.2f ms | normalize+patchify %.2f ms | "
        "total %.2f ms\n",
        what, best(st.decode), best(st.resize), best(st.patchify), best(st.total));
    if (repeat > 1)
      std::printf(
          "median    decode+h-resize %.2f ms | v-resize %.2f ms | normalize+patchify %.2f "
          "ms | total %.2f ms  (%lld runs)\n",
          median(st.decode), median(st.resize), median(st.patchify), median(st.total),
          static_cast<long long>(repeat));
  }
  if (out) {
    const std::string pv = *out + ".pixel_values.npy", gr = *out + ".grid_thw.npy";
    write_npy(pv, r.pixel_values);
    write_npy(gr, r.grid_thw());
    if (!json)
      std::printf("wrote     %s (float32 %s), %s (int64 [1, 3])\n", pv.c_str(),
                  shape_str(r.pixel_values.shape()).c_str(), gr.c_str());
  }
  return 0;
}

MMRT_COMMAND(
    "preprocess",
    "decode and preprocess one image (any family's encoder input), video (Qwen2-VL "
    "pixel_values_videos) or audio file (Qwen2-Audio input_features) into .npy",
    "usage: mmrt preprocess --model DIR --image FILE [--mode reference|fast] [--out PREFIX]\n"
    "                       [--threads N] [--repeat N] [--size WxH] [--json]\n"
    "       mmrt preprocess --model DIR --video FILE [--out PREFIX] [--video-fps F] [...]\n"
    "       mmrt preprocess --model DIR --audio FILE [--out PREFIX] [--long-audio split|refuse]\n"
    "                       [--threads N] [--repeat N] [--json]\n\n"
    "Decodes FILE (JPEG, PNG or WebP, told apart by their magic bytes), converts it to RGB as\n"
    "PIL's convert(\"RGB\") does, resizes it to smart_resize's size with PIL-exact bicubic, and\n"
    "lays it out as Qwen2-VL's pixel_values [N, 1176] float32 and grid_thw [1, 3] int64, exactly\n"
    "as the vision tower consumes them. Prints the sizes, the token count and the time per "
    "stage.\n\n"
    "Another family's checkpoint (LLaVA-NeXT / 1.5, Fuyu) gets its own processor from the\n"
    "registry: PREFIX.pixel_values.npy holds its encoder input (LLaVA: [crops, 3, side, side];\n"
    "Fuyu: [patches, 2700]); the report gives the dims, tokens, encoder cost and time.\n\n"
    "  --model DIR        folder holding preprocessor_config.json (or the JSON file itself):\n"
    "                     min_pixels/max_pixels (or size.shortest_edge/longest_edge),\n"
    "                     patch_size, temporal_patch_size, merge_size, image_mean, image_std,\n"
    "                     rescale_factor, resample\n"
    "  --image FILE       the image\n"
    "  --mode MODE        reference (default): bit-identical to transformers' PIL + numpy path;\n"
    "                     fast: JPEGs decoded with libjpeg-turbo's DCT scaling (1/2, 1/4, 1/8)\n"
    "                     when the scaled image stays at least the target size (docs/media.md)\n"
    "  --out PREFIX       write PREFIX.pixel_values.npy and PREFIX.grid_thw.npy\n"
    "  --threads N        threads for resize and patchify (default 1; decode is one thread)\n"
    "  --repeat N         run N times and report the best and median time per stage\n"
    "  --size WxH         resize to exactly WxH (multiples of patch_size*merge_size) instead of\n"
    "                     smart_resize's size\n"
    "  --max-source-pixels N  refuse larger images (default 50000000)\n"
    "  --max-image-bytes N    refuse image files larger than N bytes (default 64 MiB)\n"
    "  --json             print one JSON line instead of the text report\n\n"
    "Stages: 'decode+h-resize' is the decoder with the horizontal resize pass fused into it row\n"
    "by row; 'v-resize' is the vertical pass; 'normalize+patchify' is the fused rescale,\n"
    "normalise, temporal duplicate and patch layout.\n\n"
    "audio (--model: a qwen2-audio folder, config.json and preprocessor_config.json):\n"
    "  --audio FILE       WAV, FLAC, Ogg Vorbis/Opus or MP3, told apart by their magic bytes;\n"
    "                     decoded to mono (channel mean), resampled to 16 kHz (soxr HQ) and\n"
    "                     turned into Whisper log-mel windows of 30 s, as WhisperFeatureExtractor\n"
    "                     does. Prints the windows, valid mel frames, audio tokens and seconds.\n"
    "  --out PREFIX       write PREFIX.input_features.npy (float32 [windows, mels, frames]) and\n"
    "                     PREFIX.feature_attention_mask.npy (int32 [windows, frames])\n"
    "  --long-audio split|refuse   audio over 30 s: consecutive 30 s windows of one item\n"
    "                     (split, default) or an error naming both durations (refuse); HF's\n"
    "                     processor silently keeps only the first 30 s\n"
    "  --max-audio-bytes N    refuse audio files larger than N bytes (default 64 MiB)\n"
    "  --threads N        threads over the windows (default 1)\n\n"
    "video (--model: a qwen2-vl folder or its preprocessor_config.json):\n"
    "  --video FILE       MP4/MOV, MKV/WebM (H.264, VP9, AV1, ...) decoded with FFmpeg; frames\n"
    "                     sampled as qwen-vl-utils samples them (2 fps, an even count, torch's\n"
    "                     float32 linspace indices), resized with torchvision's float bicubic\n"
    "                     (antialiased) to the per-frame budget, patchified in 2-frame slices\n"
    "  --out PREFIX       write PREFIX.pixel_values_videos.npy (float32 [patches, 1176]),\n"
    "                     PREFIX.video_grid_thw.npy (int64 [1, 3]) and PREFIX.frame_indices.npy\n"
    "  --video-fps F      frames sampled per second (default 2)\n"
    "  --video-nframes N  sample exactly N frames (rounded to even) instead\n"
    "  --video-min-frames N / --video-max-frames N   bounds (default 4 / 768)\n"
    "  --video-min-pixels N / --video-max-pixels N   per-frame budget (default 128*28*28 /\n"
    "                     768*28*28)\n"
    "  --video-total-pixels N  budget over all frames (default 24576*28*28, qwen-vl-utils 0.0.8)\n"
    "  --video-frame-rounding round|floor   0.0.8's round-half-even of the frame count (default)\n"
    "                     or 0.0.10+'s floor\n"
    "  --no-frame-reuse   resize every sampled frame, even one equal to an earlier frame\n"
    "  --max-video-bytes N    refuse video files larger than N bytes (default 256 MiB)\n",
    {"json", "no-frame-reuse"}, run_preprocess);

}  // namespace
}  // namespace mmrt::cli
