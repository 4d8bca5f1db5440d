// The Whisper log-mel spectrogram exactly as Hugging Face's WhisperFeatureExtractor computes it
// (the numpy float64 path): the clip padded with zeros or truncated to n_samples, periodic Hann
// window of n_fft, reflect centre padding, |rfft|^2, the last frame dropped, Slaney mel filters
// with Slaney area normalisation over 0..8000 Hz (the extractor's fixed max_frequency: the
// Nyquist frequency at 16 kHz), log10 of max(mel, 1e-10), the per-item clamp at (maximum - 8),
// then (x + 4) / 4. Computed in double precision and cast to float32 once (the numpy path casts
// after the log10; tests: within 1e-5 of it, within 1e-4 of torchaudio's float32 path).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/isa.h"

namespace mmrt::media {

struct MelConfig {
  int32_t n_mels = 80;  // feature_size: 80 (Whisper <= v2), 128 (v3, Qwen2-Audio)
  int32_t n_fft = 400;
  int32_t hop_length = 160;
  int32_t sample_rate = 16000;
  int64_t n_samples = 480000;  // chunk_length * sample_rate: the padded clip length
  // Throws InvalidArgument naming the field for values the extractor cannot use: n_mels 1..512,
  // n_fft 16..8192 and even, hop_length 1..n_fft, sample_rate 8000..192000, n_samples
  // hop_length..28 800 000 (at least one frame).
  void validate(const std::string& origin) const;
  int64_t n_frames() const { return n_samples / hop_length; }  // 3000 for 30 s
};

// Frames of the attention mask (the valid part of a clip of `n_samples_in` samples before
// padding, capped at the config's n_samples): ceil(min(n, n_samples) / hop_length), as the
// feature extractor's mask subsampled with stride hop_length gives it.
int64_t mel_valid_frames(const MelConfig& cfg, int64_t n_samples_in);

// Precomputes the window, the FFT plan and the filterbank once; compute() is const and may be
// called from several threads at once (its scratch is per call). Single-threaded per call (the
// caller parallelises across items); vectorised across frames, the kernel chosen at run time at
// most `isa_cap` (tests run each variant). Throws InvalidArgument for a bad config.
class MelExtractor {
 public:
  explicit MelExtractor(const MelConfig& cfg, Isa isa_cap = Isa::kAvx512Bf16);
  ~MelExtractor();
  MelExtractor(MelExtractor&&) noexcept;
  MelExtractor& operator=(MelExtractor&&) noexcept;

  const MelConfig& config() const;
  std::string_view kernel() const;  // the variant in use: "avx512", "avx2" or "portable"

  // Log-mel features of one item, row-major [n_mels, n_frames] into `out` (n_mels * n_frames
  // floats). `samples` are mono at the config's sample rate; longer input is truncated to
  // n_samples (the caller splits long audio first when it wants all of it). Throws
  // InvalidArgument for a wrong `out` size or a non-finite sample.
  void compute(std::span<const float> samples, std::span<float> out) const;

  // The same before the per-item clamp and scaling: log10(max(mel, 1e-10)) in double,
  // [n_mels, n_frames]. For streaming (a frame is final once its samples have arrived) and tests.
  void log_mel(std::span<const float> samples, std::span<double> out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::media
