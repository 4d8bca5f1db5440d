// WhisperFeatureExtractor settings and the window plan of a clip.
#include "models/qwen2_audio/feature_extractor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_fields.h"

namespace mmrt::models::qwen2_audio {

namespace {

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

}  // namespace

FeatureExtractorConfig FeatureExtractorConfig::from_json(const std::string& text,
                                                         const std::string& origin) {
  const nlohmann::json root = io::parse_json_object(text, origin);
  io::JsonFields f(&root, nullptr, "", origin);
  auto fail = [&](const std::string& field, const std::string& what) {
    throw FormatError(origin + ": " + field + " " + what);
  };
  const std::string type = f.str_or("feature_extractor_type", "WhisperFeatureExtractor");
  if (type != "WhisperFeatureExtractor")
    fail("feature_extractor_type", "is \"" + type + "\"; Qwen2-Audio uses WhisperFeatureExtractor");
  FeatureExtractorConfig c;
  c.feature_size = f.int_or("feature_size", c.feature_size);
  c.sampling_rate = f.int_or("sampling_rate", c.sampling_rate);
  c.hop_length = f.int_or("hop_length", c.hop_length);
  c.n_fft = f.int_or("n_fft", c.n_fft);
  c.chunk_length = f.num_or("chunk_length", c.chunk_length);
  auto in_range = [&](const char* field, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
      fail(field, "is " + std::to_string(v) + ", outside [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
  };
  in_range("feature_size", c.feature_size, 1, 512);
  in_range("sampling_rate", c.sampling_rate, 8000, 192000);  // what the audio decoder resamples to
  in_range("n_fft", c.n_fft, 16, 1 << 16);
  in_range("hop_length", c.hop_length, 1, c.n_fft);
  if (!(c.chunk_length > 0 && c.chunk_length <= 3600))
    fail("chunk_length", "is " + std::to_string(c.chunk_length) + ", outside (0, 3600] seconds");
  const double n = c.chunk_length * static_cast<double>(c.sampling_rate);
  if (std::fabs(n - std::round(n)) > 1e-6)
    fail("chunk_length", std::to_string(c.chunk_length) + " s is not a whole number of samples");
  c.n_samples = static_cast<int64_t>(std::llround(n));
  if (c.n_samples < c.n_fft)
    fail("chunk_length", "gives " + std::to_string(c.n_samples) + " samples, fewer than n_fft " +
                             std::to_string(c.n_fft));
  if (auto stored = f.opt_int("n_samples"); stored && *stored != c.n_samples)
    fail("n_samples", std::to_string(*stored) + " disagrees with chunk_length * sampling_rate = " +
                          std::to_string(c.n_samples));
  if (auto stored = f.opt_int("nb_max_frames"); stored && *stored != c.n_frames())
    fail("nb_max_frames", std::to_string(*stored) + " disagrees with n_samples / hop_length = " +
                              std::to_string(c.n_frames()));
  // Settings the extractor would apply that mmrt does not implement.
  if (f.num_or("padding_value", 0.0) != 0.0)
    fail("padding_value", "must be 0.0 (silence), the only value supported");
  if (f.num_or("dither", 0.0) != 0.0) fail("dither", "must be 0.0; dithering is not supported");
  if (f.bool_or("do_normalize", false))
    fail("do_normalize", "is true; normalisation is not supported (Whisper does not use it)");
  if (f.str_or("padding_side", "right") != "right")
    fail("padding_side", "must be \"right\" (the encoder masks trailing padding)");
  return c;
}

FeatureExtractorConfig FeatureExtractorConfig::load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  return from_json(io::read_text_file(path), path);
}

void FeatureExtractorConfig::check_against(const AudioConfig& a, const std::string& origin) const {
  if (feature_size != a.num_mel_bins)
    throw FormatError(origin + ": feature_size " + std::to_string(feature_size) +
                      " disagrees with config.json's audio_config.num_mel_bins " +
                      std::to_string(a.num_mel_bins));
  if (n_frames() != a.n_frames())
    throw FormatError(origin + ": a window of " + std::to_string(n_samples) + " samples gives " +
                      std::to_string(n_frames()) + " mel frames (n_samples / hop_length), but " +
                      "the encoder takes exactly 2 * audio_config.max_source_positions = " +
                      std::to_string(a.n_frames()));
}

int64_t audio_tokens(int64_t mel_frames) {
  const int64_t conv = floor_div(mel_frames - 1, 2) + 1;
  return floor_div(conv - 2, 2) + 1;
}

int64_t valid_frames(const FeatureExtractorConfig& fe, int64_t samples) {
  // The sample mask subsampled with stride hop_length, its entries past n_frames dropped.
  const int64_t n = std::min(std::max<int64_t>(samples, 0), fe.n_samples);
  return std::min((n + fe.hop_length - 1) / fe.hop_length, fe.n_frames());
}

WindowPlan plan_windows(int64_t total, const FeatureExtractorConfig& fe,
                        LoadOptions::LongAudio long_audio) {
  if (total < 0) throw InvalidArgument("audio: negative sample count");
  if (total > fe.n_samples && long_audio == LoadOptions::LongAudio::kRefuse)
    throw InvalidArgument("the audio is " + secs(fe.seconds(total)) +
                          " long; this model takes at most " + secs(fe.seconds(fe.n_samples)) +
                          " per clip and long audio is refused (long_audio = refuse)");
  WindowPlan p;
  for (int64_t at = 0; at < total; at += fe.n_samples) {
    const int64_t n = std::min(fe.n_samples, total - at);
    const int64_t frames = valid_frames(fe, n);
    const int64_t tokens = audio_tokens(frames);
    if (tokens < 1) continue;  // only a clip's last window can be this short
    p.samples.push_back(n);
    p.frames.push_back(frames);
    p.n_tokens += tokens;
  }
  if (p.n_tokens < 1)
    throw InvalidArgument("the audio is " + std::to_string(total) + " samples (" +
                          secs(fe.seconds(total)) +
                          ") long, too short for one audio token: " + "at least " +
                          std::to_string(2 * fe.hop_length + 1) + " samples are needed");
  return p;
}

}  // namespace mmrt::models::qwen2_audio
