// Mono resampling with libsoxr at librosa's settings (soxr "HQ", float32 in and out), one thread,
// and the output length librosa.resample fixes.
#include <soxr.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "media/audio.h"
#include "media/audio_internal.h"

namespace mmrt::media {
namespace {

constexpr int32_t kMaxRate = 768000;
constexpr int64_t kMaxOutput = int64_t{1} << 30;  // 4 GiB of float samples

void check_rate(int32_t rate, const char* which) {
  if (rate < 1 || rate > kMaxRate)
    throw InvalidArgument(std::string("resample_audio: ") + which + " rate " +
                          std::to_string(rate) + " Hz is outside 1.." + std::to_string(kMaxRate));
}

}  // namespace

namespace detail {

int64_t resampled_length(int64_t n, int32_t from_rate, int32_t to_rate) {
  if (from_rate == to_rate) return n;
  const double ratio = static_cast<double>(to_rate) / static_cast<double>(from_rate);
  return static_cast<int64_t>(std::ceil(static_cast<double>(n) * ratio));
}

}  // namespace detail

int64_t AudioInfo::frames_at(int32_t rate) const {
  if (rate < 1) throw InvalidArgument("AudioInfo::frames_at: rate must be positive");
  if (sample_rate < 1 || frames < 0) return 0;
  return detail::resampled_length(frames, sample_rate, rate);
}

std::vector<float> resample_audio(std::span<const float> in, int32_t from_rate, int32_t to_rate) {
  check_rate(from_rate, "input");
  check_rate(to_rate, "output");
  if (from_rate == to_rate || in.empty()) return std::vector<float>(in.begin(), in.end());
  const int64_t len = detail::resampled_length(static_cast<int64_t>(in.size()), from_rate, to_rate);
  if (len > kMaxOutput)
    throw ResourceExhausted("resample_audio: " + std::to_string(len) +
                            " output samples, over the limit of " + std::to_string(kMaxOutput));
  // soxr_oneshot flushes and writes round(n * to / from) samples (python-soxr returns them), and
  // librosa's fix_length pads that with zeros to `len`: the zero-initialised tail.
  std::vector<float> out(static_cast<size_t>(len), 0.0f);
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  const soxr_runtime_spec_t runtime = soxr_runtime_spec(1);  // no OpenMP threads
  size_t idone = 0, odone = 0;
  const soxr_error_t err = soxr_oneshot(from_rate, to_rate, 1, in.data(), in.size(), &idone,
                                        out.data(), out.size(), &odone, &io, &quality, &runtime);
  if (err) throw InternalError(std::string("resample_audio: libsoxr: ") + err);
  return out;
}

}  // namespace mmrt::media
