// Audio file bytes from the network or a user: format detection, header probe, libsndfile decode
// (WAV, FLAC, Ogg Vorbis/Opus, MP3), downmix, libsoxr resample to 16 kHz, then the Whisper log-mel
// of the result as Qwen2-Audio's feature extractor runs it. Any input may fail with an
// mmrt::Error; nothing may crash, leak, read out of bounds, overflow or decode past the limits.
// The input is the file itself (no mode byte), so a finding is a file the CLI can be given.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "core/error.h"
#include "media/audio.h"
#include "media/mel.h"

using namespace mmrt;

namespace {

// Small limits keep each run short; the checks are the same as at the defaults.
constexpr media::AudioDecodeOptions kOpts{
    .target_rate = 16000, .max_seconds = 30.0, .max_bytes = 1u << 20, .max_channels = 32};

const media::MelExtractor& mel() {
  static const media::MelExtractor m(media::MelConfig{.n_mels = 80, .n_samples = 16000});
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  (void)media::detect_audio_format(bytes);
  media::AudioInfo info;
  try {
    info = media::probe_audio(bytes, kOpts);
  } catch (const Error&) {
  }
  try {
    const std::vector<float> y = media::decode_audio(bytes, kOpts);
    // What decode_audio promises: the header passed probe with the same limits, and the samples
    // are no more than the header's count at the target rate (MP3: at most; others: exactly).
    if (info.frames <= 0 || info.seconds() > kOpts.max_seconds) std::abort();
    const int64_t n = info.frames_at(kOpts.target_rate);
    if (static_cast<int64_t>(y.size()) > n) std::abort();
    if (info.format != media::AudioFormat::kMp3 && static_cast<int64_t>(y.size()) != n)
      std::abort();
    const media::MelConfig& c = mel().config();
    std::vector<float> out(static_cast<size_t>(c.n_mels * c.n_frames()));
    mel().compute(y, out);
    for (float v : out)
      if (!std::isfinite(v)) std::abort();
  } catch (const Error&) {
  }
  return 0;
}
