// Test helper: deterministic 16-bit PCM mono WAV files for the Qwen2-Audio tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "media/audio.h"

namespace mmrt::test {

// n samples at `rate`: a few tones under a slow envelope plus a little noise.
inline void write_wav(const std::filesystem::path& p, int64_t n, uint32_t seed,
                      int32_t rate = 16000) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.02);
  std::vector<int16_t> pcm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / rate;
    const double x =
        0.3 * std::sin(2 * M_PI * 440 * t) * (0.6 + 0.4 * std::sin(2 * M_PI * 0.7 * t)) +
        0.2 * std::sin(2 * M_PI * (1200 + 300 * std::sin(t)) * t) + noise(rng);
    pcm[static_cast<size_t>(i)] =
        static_cast<int16_t>(std::lround(std::clamp(x, -1.0, 1.0) * 32000));
  }
  const std::vector<uint8_t> wav = media::encode_wav_pcm16(pcm, rate);
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(wav.data()), static_cast<std::streamsize>(wav.size()));
}

}  // namespace mmrt::test
