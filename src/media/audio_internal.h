// Internal pieces of the audio decoder shared by audio.cpp, audio_resample.cpp and the tests.
// Not part of the public API.
#pragma once

#include <cstdint>

namespace mmrt::media::detail {

// librosa's to_mono: out[i] = mean of the `channels` interleaved values of frame i, summed in
// float32 in channel order and divided by the count in float32 (numpy's np.mean for <= 8
// channels, exactly).
void downmix_mean(const float* interleaved, int64_t frames, int channels, float* out);

// librosa.resample's output length: ceil(n * (to / from)) in double (fix_length pads with zeros or
// cuts to it). Equal to the exact integer ceiling for the usual rates into 16 kHz; for some pairs
// (44100 -> 48000 at n = 147, ...) the rounded ratio makes it one more, as in librosa.
int64_t resampled_length(int64_t n, int32_t from_rate, int32_t to_rate);

}  // namespace mmrt::media::detail
