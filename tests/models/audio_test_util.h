// Test helper: deterministic 16-bit PCM mono WAV files for the Qwen2-Audio tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

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
  std::ofstream f(p, std::ios::binary);
  auto u32 = [&](uint32_t v) { f.write(reinterpret_cast<const char*>(&v), 4); };
  auto u16 = [&](uint16_t v) { f.write(reinterpret_cast<const char*>(&v), 2); };
  const auto data = static_cast<uint32_t>(n * 2);
  f.write("RIFF", 4);
  u32(36 + data);
  f.write("WAVEfmt ", 8);
  u32(16);
  u16(1);  // PCM
  u16(1);  // mono
  u32(static_cast<uint32_t>(rate));
  u32(static_cast<uint32_t>(rate * 2));
  u16(2);
  u16(16);
  f.write("data", 4);
  u32(data);
  f.write(reinterpret_cast<const char*>(pcm.data()), data);
}

}  // namespace mmrt::test
