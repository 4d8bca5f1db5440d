// Audio in isolation, one thread: the Whisper log-mel features of a 30 s clip (80 and 128 mels,
// per kernel variant) and decode + resample of a 30 s 48 kHz PCM16 WAV to 16 kHz (and the decode
// alone). bench/mel_compare.py runs the mel benchmarks next to the HF numpy and torchaudio
// implementations and prints the ratios.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/isa.h"
#include "media/audio.h"
#include "media/mel.h"

using namespace mmrt;
using namespace mmrt::media;

namespace {

// Tones, a chirp and noise under a slow envelope (nothing a kernel could shortcut).
std::vector<float> make_clip(double seconds, int rate) {
  std::mt19937 rng(11);
  std::normal_distribution<float> noise(0.0f, 0.02f);
  std::vector<float> x(static_cast<size_t>(seconds * rate));
  for (size_t i = 0; i < x.size(); ++i) {
    const double t = static_cast<double>(i) / rate;
    const double v = 0.2 * std::sin(2 * M_PI * 440 * t) + 0.1 * std::sin(2 * M_PI * 3000 * t) +
                     0.05 * std::sin(2 * M_PI * (200 + 150 * t) * t);
    x[i] = static_cast<float>(v * (0.5 + 0.5 * std::pow(std::sin(2 * M_PI * 0.25 * t), 2))) +
           noise(rng);
  }
  return x;
}

std::vector<uint8_t> pcm16_wav(const std::vector<float>& x, int rate) {
  std::vector<int16_t> pcm(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    pcm[i] = static_cast<int16_t>(std::lrint(std::fmax(-1.0f, std::fmin(1.0f, x[i])) * 32767.0f));
  return media::encode_wav_pcm16(pcm, rate);
}

void BM_Mel(benchmark::State& state, const char* isa, int n_mels) {
  const auto cap = parse_isa(isa);
  if (!cap || !isa_supported(*cap)) {
    state.SkipWithError("kernel variant not supported on this CPU");
    return;
  }
  MelConfig cfg;
  cfg.n_mels = n_mels;
  const MelExtractor mel(cfg, *cap);
  const std::vector<float> clip = make_clip(30.0, 16000);
  std::vector<float> out(static_cast<size_t>(cfg.n_mels * cfg.n_frames()));
  for (auto _ : state) {
    mel.compute(clip, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["frames/s"] = benchmark::Counter(
      static_cast<double>(cfg.n_frames()) * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_DecodeWav(benchmark::State& state, int target_rate) {
  const std::vector<uint8_t> wav = pcm16_wav(make_clip(30.0, 48000), 48000);
  AudioDecodeOptions opts;
  opts.target_rate = target_rate;
  for (auto _ : state) {
    std::vector<float> out = decode_audio(wav, opts);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["audio_s/s"] =
      benchmark::Counter(30.0 * state.iterations(), benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK_CAPTURE(BM_Mel, 80_avx512, "avx512", 80)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Mel, 80_avx2, "avx2", 80)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Mel, 80_portable, "portable", 80)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Mel, 128_avx512, "avx512", 128)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Mel, 128_avx2, "avx2", 128)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Mel, 128_portable, "portable", 128)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DecodeWav, 48k_to_16k, 16000)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DecodeWav, 48k_decode_only, 48000)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
