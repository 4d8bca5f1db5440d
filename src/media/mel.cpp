// The Whisper log-mel extractor: config checks, the plan (window, FFT, Slaney filterbank, built
// exactly as transformers.audio_utils builds them in float64), padding, and the per-item clamp.
// The per-frame work is in the ISA kernels (mel_kernel_impl.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "core/error.h"
#include "media/mel.h"
#include "media/mel_internal.h"

namespace mmrt::media {
namespace {

constexpr int64_t kMaxSamples = int64_t{48000} * 600;
constexpr double kMaxFrequency =
    8000.0;  // WhisperFeatureExtractor's mel_filter_bank(max_frequency)

void check_range(const std::string& origin, const char* field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    throw InvalidArgument(origin + ": " + field + " = " + std::to_string(v) + " is out of range " +
                          std::to_string(lo) + ".." + std::to_string(hi));
}

// audio_utils.hertz_to_mel / mel_to_hertz, mel_scale="slaney".
double hertz_to_mel(double f) {
  if (f >= 1000.0) return 15.0 + std::log(f / 1000.0) * (27.0 / std::log(6.4));
  return 3.0 * f / 200.0;
}
double mel_to_hertz(double m) {
  if (m >= 15.0) return 1000.0 * std::exp(std::log(6.4) / 27.0 * (m - 15.0));
  return 200.0 * m / 3.0;
}

// np.linspace(start, stop, num): i * ((stop - start) / (num - 1)) + start, the last one = stop.
std::vector<double> linspace(double start, double stop, int64_t num) {
  std::vector<double> y(static_cast<size_t>(num));
  const double step = (stop - start) / static_cast<double>(num - 1);
  for (int64_t i = 0; i < num; ++i) y[i] = static_cast<double>(i) * step + start;
  if (num > 1) y.back() = stop;
  return y;
}

// audio_utils.mel_filter_bank(n_bins, n_mels, 0, 8000, rate, norm="slaney", mel_scale="slaney"),
// stored sparsely (each filter's non-zero bins are contiguous).
void build_filterbank(const MelConfig& cfg, detail::MelPlan& p) {
  const std::vector<double> mels =
      linspace(hertz_to_mel(0.0), hertz_to_mel(kMaxFrequency), cfg.n_mels + 2);
  std::vector<double> ff(mels.size());
  for (size_t i = 0; i < mels.size(); ++i) ff[i] = mel_to_hertz(mels[i]);
  // linspace(0, sampling_rate // 2, n_bins)
  const std::vector<double> fft_freqs =
      linspace(0.0, static_cast<double>(cfg.sample_rate / 2), p.n_bins);
  for (int32_t i = 0; i < cfg.n_mels; ++i) {
    const double d0 = ff[i + 1] - ff[i], d1 = ff[i + 2] - ff[i + 1];
    const double enorm = 2.0 / (ff[i + 2] - ff[i]);
    int32_t first = -1, last = -1;
    std::vector<double> w(static_cast<size_t>(p.n_bins));
    for (int32_t b = 0; b < p.n_bins; ++b) {
      const double down = -(ff[i] - fft_freqs[b]) / d0;
      const double up = (ff[i + 2] - fft_freqs[b]) / d1;
      w[b] = std::max(0.0, std::min(down, up)) * enorm;
      if (w[b] != 0.0) {
        if (first < 0) first = b;
        last = b;
      }
    }
    p.bin_begin.push_back(std::max(first, 0));
    p.bin_count.push_back(first < 0 ? 0 : last - first + 1);
    p.weight_offset.push_back(static_cast<int64_t>(p.weights.size()));
    if (first >= 0) p.weights.insert(p.weights.end(), w.begin() + first, w.begin() + last + 1);
  }
}

// np.pad(x, n_fft // 2, mode="reflect") index: period 2 (L - 1) mirror without repeating the
// edge (x[-k] = x[k]); numpy reflects the same way again when the pad exceeds the clip. Positions
// inside the clip map to themselves.
int64_t reflect_index(int64_t i, int64_t len) {
  if (len == 1) return 0;
  const int64_t period = 2 * (len - 1);
  int64_t j = i % period;
  if (j < 0) j += period;
  return j >= len ? period - j : j;
}

}  // namespace

void MelConfig::validate(const std::string& origin) const {
  check_range(origin, "n_mels (feature_size)", n_mels, 1, 512);
  check_range(origin, "n_fft", n_fft, 16, 8192);
  if (n_fft % 2 != 0)
    throw InvalidArgument(origin + ": n_fft = " + std::to_string(n_fft) + " must be even");
  check_range(origin, "hop_length", hop_length, 1, n_fft);
  check_range(origin, "sample_rate (sampling_rate)", sample_rate, 8000, 192000);
  check_range(origin, "n_samples", n_samples, 1, kMaxSamples);
  if (n_samples < hop_length)
    throw InvalidArgument(origin + ": n_samples = " + std::to_string(n_samples) +
                          " is shorter than hop_length = " + std::to_string(hop_length) +
                          " (no frame)");
}

int64_t mel_valid_frames(const MelConfig& cfg, int64_t n_samples_in) {
  if (n_samples_in <= 0 || cfg.hop_length <= 0) return 0;
  const int64_t n = std::min(n_samples_in, cfg.n_samples);
  return std::min((n + cfg.hop_length - 1) / cfg.hop_length, cfg.n_frames());
}

struct MelExtractor::Impl {
  MelConfig cfg;
  detail::MelPlan plan;
  const detail::MelKernels* kern = nullptr;

  // The frame table over the clip (x zero-padded or truncated to n_samples, then reflect-padded
  // by n_fft / 2 on each side, all in float as numpy pads the float32 clip): frames inside the
  // input point into it, frames inside the zero padding at a zero frame, and only the few that
  // touch an edge are materialised (no copy of the clip).
  struct Frames {
    std::vector<const float*> ptr;  // [n_frames + 8]
    std::unique_ptr<float[]> edge;  // materialised frames, then one frame of zeros
  };
  Frames frames(std::span<const float> samples) const {
    const int64_t len = cfg.n_samples, half = cfg.n_fft / 2, n_fft = cfg.n_fft;
    const int64_t hop = cfg.hop_length, n_ptr = cfg.n_frames() + 8;
    const int64_t n_in = std::min<int64_t>(static_cast<int64_t>(samples.size()), len);
    const float* x = samples.data();
    // Non-finite floats have every exponent bit set (one branch-free pass, then the index).
    uint32_t bad = 0;
    for (int64_t i = 0; i < n_in; ++i) {
      uint32_t bits;
      std::memcpy(&bits, x + i, sizeof bits);
      bad |= static_cast<uint32_t>((bits & 0x7F800000u) == 0x7F800000u);
    }
    if (bad)
      for (int64_t i = 0; i < n_in; ++i)
        if (!std::isfinite(x[i]))
          throw InvalidArgument("MelExtractor: sample " + std::to_string(i) + " is not finite");
    // Frame t covers clip positions [t * hop - half, t * hop - half + n_fft).
    enum Kind : uint8_t { kInput, kZero, kEdge };
    auto kind = [&](int64_t t) {
      const int64_t a = t * hop - half, b = a + n_fft;
      if (a >= 0 && b <= n_in) return kInput;
      if (a >= n_in && b <= len) return kZero;
      return kEdge;
    };
    int64_t n_edge = 0;
    for (int64_t t = 0; t < n_ptr; ++t) n_edge += kind(t) == kEdge;
    Frames f;
    f.edge.reset(new float[static_cast<size_t>((n_edge + 1) * n_fft)]);
    float* zero = f.edge.get() + n_edge * n_fft;
    std::fill(zero, zero + n_fft, 0.0f);
    auto clip = [&](int64_t i) {                      // padded clip value at clip position i
      if (i < -half || i >= len + half) return 0.0f;  // the spare lanes past the padded clip
      const int64_t j = reflect_index(i, len);
      return j < n_in ? x[j] : 0.0f;
    };
    f.ptr.resize(static_cast<size_t>(n_ptr));
    float* e = f.edge.get();
    for (int64_t t = 0; t < n_ptr; ++t) {
      const int64_t a = t * hop - half;
      switch (kind(t)) {
        case kInput:
          f.ptr[t] = x + a;
          break;
        case kZero:
          f.ptr[t] = zero;
          break;
        case kEdge:
          for (int64_t k = 0; k < n_fft; ++k) e[k] = clip(a + k);
          f.ptr[t] = e;
          e += n_fft;
      }
    }
    return f;
  }

  double log_mel(std::span<const float> samples, double* out) const {
    const Frames f = frames(samples);
    return kern->log_mel(plan, f.ptr.data(), cfg.n_frames(), out);
  }
};

MelExtractor::MelExtractor(const MelConfig& cfg, Isa isa_cap) : impl_(std::make_unique<Impl>()) {
  cfg.validate("MelConfig");
  impl_->cfg = cfg;
  detail::MelPlan& p = impl_->plan;
  p.n_fft = cfg.n_fft;
  p.hop = cfg.hop_length;
  p.n_bins = cfg.n_fft / 2 + 1;
  p.n_mels = cfg.n_mels;
  // window_function(n_fft, "hann") = np.hanning(n_fft + 1)[:-1]; np.hanning(M)[k] =
  // 0.5 + 0.5 cos(pi (1 - M + 2k) / (M - 1)).
  const int64_t big_m = cfg.n_fft + 1;
  p.window.resize(static_cast<size_t>(cfg.n_fft));
  for (int64_t k = 0; k < cfg.n_fft; ++k)
    p.window[k] = 0.5 + 0.5 * std::cos(std::numbers::pi * static_cast<double>(1 - big_m + 2 * k) /
                                       static_cast<double>(big_m - 1));
  const int32_t half = cfg.n_fft / 2;
  p.fft = detail::make_fft_plan(half);
  for (int32_t k = 0; k <= half; ++k) {
    const double a = 2.0 * std::numbers::pi * static_cast<double>(k) / cfg.n_fft;
    p.split_re.push_back(std::cos(a));
    p.split_im.push_back(-std::sin(a));
  }
  build_filterbank(cfg, p);
  impl_->kern = &detail::mel_kernels(isa_cap);
}

MelExtractor::~MelExtractor() = default;
MelExtractor::MelExtractor(MelExtractor&&) noexcept = default;
MelExtractor& MelExtractor::operator=(MelExtractor&&) noexcept = default;

const MelConfig& MelExtractor::config() const {
  return impl_->cfg;
}

std::string_view MelExtractor::kernel() const {
  return impl_->kern->name;
}

void MelExtractor::log_mel(std::span<const float> samples, std::span<double> out) const {
  const MelConfig& c = impl_->cfg;
  const int64_t want = c.n_mels * c.n_frames();
  if (static_cast<int64_t>(out.size()) != want)
    throw InvalidArgument("MelExtractor::log_mel: output holds " + std::to_string(out.size()) +
                          " values, [n_mels, n_frames] needs " + std::to_string(want));
  impl_->log_mel(samples, out.data());
}

void MelExtractor::compute(std::span<const float> samples, std::span<float> out) const {
  const MelConfig& c = impl_->cfg;
  const int64_t want = c.n_mels * c.n_frames();
  if (static_cast<int64_t>(out.size()) != want)
    throw InvalidArgument("MelExtractor::compute: output holds " + std::to_string(out.size()) +
                          " values, [n_mels, n_frames] needs " + std::to_string(want));
  const std::unique_ptr<double[]> y(new double[static_cast<size_t>(want)]);
  // The per-item dynamic-range clamp over the whole [n_mels, n_frames] matrix, then the scale.
  const double floor = impl_->log_mel(samples, y.get()) - 8.0;
  impl_->kern->finish(y.get(), want, floor, out.data());
}

}  // namespace mmrt::media
