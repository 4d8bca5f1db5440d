// Audio decoding, resampling and the Whisper log-mel features against independent references
// (tests/reference/whisper_mel_ref.py, run once per process under Debian's Python): the HF
// numpy float64 path and torchaudio 0.13 (float32) for the features, python-soundfile for the
// decoded samples, scipy.signal.resample_poly for the resampler. Stated tolerances:
//   mel vs HF numpy float64: 1e-5 abs (every ISA variant); vs torchaudio float32: 1e-4 abs
//   beyond the HF-torchaudio disagreement at that value (torchaudio builds its Slaney filters in
//   float32: a tone at a filter's foot moves 128-mel features by up to ~2e-4)
//   decode vs soundfile (same libsndfile): exact, every format, downmix included
//   soxr HQ vs scipy's polyphase resampler below 6 kHz: see ResampleCloseToScipyPolyphase
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/isa.h"
#include "core/tensor.h"
#include "io/npy.h"
#include "media/audio.h"
#include "media/mel.h"
#include "media_test_util.h"

namespace {

namespace fs = std::filesystem;
using mmrt::Isa;
using mmrt::Tensor;
using namespace mmrt::media;

using Ref = media_test::RefRun;

const Ref& ref() {
  static const Ref r("whisper_mel_ref.py", "audio_ref");
  return r;
}

#define REF_OR_FAIL(var)  \
  const Ref& var = ref(); \
  ASSERT_TRUE(var.error.empty()) << var.error

const auto& bytes_of = media_test::read_bytes;

std::vector<float> floats(const fs::path& p) {
  const Tensor t = mmrt::io::read_npy(p.string());
  EXPECT_EQ(t.dtype(), mmrt::DType::kF32) << p;
  const float* d = t.data<float>();
  return std::vector<float>(d, d + t.numel());
}

std::vector<Isa> variants() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512})
    if (mmrt::isa_supported(isa)) v.push_back(isa);
  return v;
}

// Largest |a - b| (and where), lengths checked by the caller.
struct MaxErr {
  double err = 0;
  size_t at = 0;
};
template <class A, class B>
MaxErr max_err(const A& a, const B& b) {
  MaxErr m;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (!(e <= m.err)) m = {e, i};
  }
  return m;
}

TEST(AudioRef, MelMatchesHfNumpyAndTorchaudio) {
  REF_OR_FAIL(r);
  ASSERT_GE(r.manifest["mel"].size(), 16u);
  double worst_hf = 0, worst_ta = 0, worst_ref = 0, worst_log = 0;
  for (Isa isa : variants()) {
    for (const auto& c : r.manifest["mel"]) {
      const std::string name = c["name"];
      MelConfig cfg;
      cfg.n_mels = c["n_mels"];
      cfg.n_fft = c["n_fft"];
      cfg.hop_length = c["hop"];
      cfg.n_samples = c["n_samples"];
      const MelExtractor mel(cfg, isa);
      const std::vector<float> x = floats(r.dir / c["input"].get<std::string>());
      const std::vector<float> hf = floats(r.dir / c["hf"].get<std::string>());
      const std::vector<float> ta = floats(r.dir / c["ta"].get<std::string>());
      std::vector<float> got(static_cast<size_t>(cfg.n_mels * cfg.n_frames()));
      ASSERT_EQ(got.size(), hf.size()) << name;
      ASSERT_EQ(got.size(), ta.size()) << name;
      mel.compute(x, got);
      const MaxErr e_hf = max_err(got, hf), e_ta = max_err(got, ta), e_ref = max_err(hf, ta);
      EXPECT_LE(e_hf.err, 1e-5) << name << " [" << mel.kernel() << "] vs HF numpy at mel "
                                << e_hf.at / cfg.n_frames() << ", frame "
                                << e_hf.at % cfg.n_frames();
      size_t beyond = 0, first = 0;
      for (size_t i = 0; i < got.size(); ++i)
        if (std::abs(got[i] - ta[i]) > 1e-4 + std::abs(hf[i] - ta[i]) && beyond++ == 0) first = i;
      EXPECT_EQ(beyond, 0u) << name << " [" << mel.kernel() << "] vs torchaudio at mel "
                            << first / cfg.n_frames() << ", frame " << first % cfg.n_frames()
                            << ": " << got[first] << " vs " << ta[first] << " (HF " << hf[first]
                            << ")";
      worst_hf = std::max(worst_hf, e_hf.err);
      worst_ta = std::max(worst_ta, e_ta.err);
      worst_ref = std::max(worst_ref, e_ref.err);
      if (c.contains("hf_log")) {
        const std::vector<float> want = floats(r.dir / c["hf_log"].get<std::string>());
        std::vector<double> log(got.size());
        mel.log_mel(x, log);
        ASSERT_EQ(want.size(), log.size());
        // The reference is float32 of values down to -10: 1e-5 covers its rounding.
        const MaxErr e = max_err(log, want);
        EXPECT_LE(e.err, 1e-5) << name << " log_mel [" << mel.kernel() << "]";
        worst_log = std::max(worst_log, e.err);
      }
    }
  }
  std::printf(
      "[ mel ] max abs error vs HF numpy float64 %.3g, vs torchaudio float32 %.3g (HF vs "
      "torchaudio themselves: %.3g), log_mel vs HF %.3g (%zu cases x %zu ISA variants)\n",
      worst_hf, worst_ta, worst_ref, worst_log, r.manifest["mel"].size(), variants().size());
}

TEST(AudioRef, DecodeMatchesSoundfile) {
  REF_OR_FAIL(r);
  ASSERT_GE(r.manifest["decode"].size(), 13u);
  for (const auto& c : r.manifest["decode"]) {
    const std::string name = c["name"];
    const std::vector<uint8_t> data = bytes_of(r.dir / c["file"].get<std::string>());
    const std::vector<float> want = floats(r.dir / c["expected"].get<std::string>());
    const AudioInfo info = probe_audio(data);
    EXPECT_EQ(info.sample_rate, c["rate"].get<int>()) << name;
    EXPECT_EQ(info.channels, c["channels"].get<int>()) << name;
    EXPECT_EQ(info.frames, c["frames"].get<int64_t>()) << name;
    AudioDecodeOptions opts;
    opts.target_rate = info.sample_rate;  // decode only: no resampling
    const std::vector<float> got = decode_audio(data, opts);
    ASSERT_EQ(got.size(), want.size()) << name;
    const MaxErr e = max_err(got, want);
    EXPECT_LE(e.err, c["tol"].get<double>()) << name << " (" << info.codec << ") at " << e.at;
    std::printf("[ decode ] %-24s %-13s %6d Hz x%d %6zu frames: max abs error %.3g\n", name.c_str(),
                std::string(info.codec).c_str(), info.sample_rate, info.channels, got.size(),
                e.err);
  }
}

// PCM16 -> float is x / 32768 (libsndfile's normalisation), checked from the file's own bytes.
TEST(AudioRef, Pcm16ScalingFromTheRawBytes) {
  const std::vector<uint8_t> data = bytes_of("/usr/share/sounds/alsa/Front_Center.wav");
  ASSERT_GT(data.size(), 44u) << "alsa-utils' Front_Center.wav is missing";
  size_t pos = 12, off = 0, len = 0;
  while (pos + 8 <= data.size()) {
    const uint32_t sz =
        data[pos + 4] | data[pos + 5] << 8 | data[pos + 6] << 16 | uint32_t(data[pos + 7]) << 24;
    if (std::equal(data.begin() + pos, data.begin() + pos + 4, "data")) {
      off = pos + 8, len = sz;
      break;
    }
    pos += 8 + sz + (sz & 1);
  }
  ASSERT_GT(len, 0u);
  AudioDecodeOptions opts;
  opts.target_rate = 48000;
  const std::vector<float> got = decode_audio(data, opts);
  ASSERT_EQ(got.size(), len / 2);
  for (size_t i = 0; i < got.size(); ++i) {
    const int16_t v = static_cast<int16_t>(data[off + 2 * i] | data[off + 2 * i + 1] << 8);
    ASSERT_EQ(got[i], static_cast<float>(v) / 32768.0f) << i;
  }
}

// Hann-windowed sinc low-pass (511 taps, unit DC gain), applied "same"-aligned.
std::vector<double> low_pass(const std::vector<float>& x, double cutoff_hz, double rate) {
  constexpr int kTaps = 511, kHalf = kTaps / 2;
  std::vector<double> h(kTaps);
  double sum = 0;
  for (int i = 0; i < kTaps; ++i) {
    const double k = i - kHalf, fc = cutoff_hz / rate;
    const double sinc = k == 0 ? 2 * fc : std::sin(2 * M_PI * fc * k) / (M_PI * k);
    h[i] = sinc * (0.5 + 0.5 * std::cos(2 * M_PI * k / (kTaps - 1)));
    sum += h[i];
  }
  std::vector<double> y(x.size(), 0.0);
  for (size_t n = 0; n < x.size(); ++n)
    for (int i = 0; i < kTaps; ++i) {
      const int64_t j = static_cast<int64_t>(n) + kHalf - i;
      if (j >= 0 && j < static_cast<int64_t>(x.size())) y[n] += h[i] / sum * x[j];
    }
  return y;
}

struct Snr {
  double db = 0, max_abs = 0;
};
Snr snr(const std::vector<double>& got, const std::vector<double>& want, size_t edge) {
  double sig = 0, noise = 0, worst = 0;
  for (size_t i = edge; i + edge < got.size(); ++i) {
    const double d = got[i] - want[i];
    sig += want[i] * want[i];
    noise += d * d;
    worst = std::max(worst, std::abs(d));
  }
  return {10 * std::log10(sig / std::max(noise, 1e-300)), worst};
}

// soxr HQ against scipy's polyphase resampler. Both are compared below 6 kHz (a 511-tap low-pass
// applied to both, 300 samples at each end left out): above that the filters' transition bands
// differ by design (soxr HQ's passband ends near 7.3 kHz, scipy's default Kaiser filter rolls off
// around 8 kHz and lets some aliasing through; speech has ~3 % of its energy at 7-9 kHz, so
// full-band agreement is only ~25 dB). Bounds: default scipy filter (its passband ripple limits
// the agreement): SNR > 55 dB, max abs error < 1e-3; sharp Kaiser filter: SNR > 110 dB, max abs
// error < 2e-6.
TEST(AudioRef, ResampleCloseToScipyPolyphase) {
  REF_OR_FAIL(r);
  ASSERT_GE(r.manifest["resample"].size(), 2u);
  for (const auto& c : r.manifest["resample"]) {
    const std::string name = c["name"];
    const std::vector<uint8_t> data = bytes_of(r.dir / c["file"].get<std::string>());
    AudioDecodeOptions opts;
    opts.target_rate = c["rate_out"];
    const std::vector<float> got = decode_audio(data, opts);
    const AudioInfo info = probe_audio(data, opts);
    // scipy's resample_poly length is ceil(n * up / down), the same rule as librosa's.
    ASSERT_EQ(static_cast<int64_t>(got.size()), info.frames_at(opts.target_rate)) << name;
    const std::vector<double> g = low_pass(got, 6000, opts.target_rate);
    for (const char* key : {"expected", "expected_sharp"}) {
      const std::vector<float> want = floats(r.dir / c[key].get<std::string>());
      ASSERT_EQ(got.size(), want.size()) << name;
      const Snr s = snr(g, low_pass(want, 6000, opts.target_rate), 300);
      const bool sharp = std::string(key) == "expected_sharp";
      EXPECT_GT(s.db, sharp ? 110.0 : 55.0) << name << " " << key;
      EXPECT_LT(s.max_abs, sharp ? 2e-6 : 1e-3) << name << " " << key;
      std::printf(
          "[ resample ] %-18s %d -> %d Hz, soxr HQ vs scipy resample_poly (%s filter), "
          "below 6 kHz: SNR %.1f dB, max abs error %.3g\n",
          name.c_str(), c["rate_in"].get<int>(), opts.target_rate,
          sharp ? "sharp Kaiser" : "default", s.db, s.max_abs);
    }
  }
}

}  // namespace
