// Internal pieces of the Whisper log-mel extractor shared by mel.cpp, mel_fft.cpp and the
// per-ISA kernel files (mel_kernel*.cpp). Not part of the public API.
#pragma once

#include <cstdint>
#include <vector>

#include "core/isa.h"

namespace mmrt::media::detail {

// A complex FFT of length n as Stockham auto-sort stages (decimation in frequency, no bit
// reversal): stage i has radix p, sub-length l = p * m and stride s (the product of the earlier
// radices); its twiddles W_l^(j*k) for j < m, 1 <= k < p are stored [j][k - 1] from tw_offset,
// and a radix without a dedicated butterfly has its roots W_p^t, t < p, from root_offset.
struct FftStage {
  int32_t p = 0, m = 0, s = 0;
  int64_t tw_offset = 0, root_offset = 0;
};
struct FftPlan {
  int32_t n = 0;
  std::vector<FftStage> stages;
  std::vector<double> tw_re, tw_im;
  std::vector<double> root_re, root_im;
  int32_t max_generic_radix = 0;  // the largest radix without a dedicated butterfly (0: none)
};
// Radices 8, 4, 2, 3, 5 first, then the remaining prime factors (generic O(p^2) butterflies).
FftPlan make_fft_plan(int32_t n);

// Everything compute() needs, built once by the MelExtractor.
struct MelPlan {
  int32_t n_fft = 0, hop = 0, n_bins = 0, n_mels = 0;
  std::vector<double> window;  // [n_fft] periodic Hann, np.hanning(n_fft + 1)[:-1]
  FftPlan fft;                 // complex FFT of length n_fft / 2 (the real FFT's half)
  // Real-FFT split: X[k] = E[k] + e^(-2 pi i k / n_fft) O[k], k = 0..n_fft/2.
  std::vector<double> split_re, split_im;  // [n_fft / 2 + 1]
  // Sparse mel filters: filter j covers bins [bin_begin[j], bin_begin[j] + bin_count[j]) with
  // weights from weight_offset[j].
  std::vector<int32_t> bin_begin, bin_count;
  std::vector<int64_t> weight_offset;
  std::vector<double> weights;
};

// One ISA variant: log10(max(mel, 1e-10)) of frames [0, n_frames) into out [n_mels, n_frames]
// (row stride n_frames); returns the largest value written. frames[t] points at the n_fft
// samples of frame t (the reflect-padded clip from t * hop); the table has n_frames + 8 entries
// (the last block's spare lanes read valid memory too).
struct MelKernels {
  const char* name;
  int32_t lanes;  // frames per vector
  double (*log_mel)(const MelPlan& plan, const float* const* frames, int64_t n_frames, double* out);
  // out[i] = float((max(y[i], floor) + 4) / 4): the clamp and scale of compute().
  void (*finish)(const double* y, int64_t n, double floor, float* out);
};
const MelKernels& mel_kernels(Isa cap);
const MelKernels& portable_mel_kernels();  // mel_kernel.cpp (SSE2, 2 frames a vector)
const MelKernels& avx2_mel_kernels();      // mel_kernel_avx2.cpp (4 frames)
const MelKernels& avx512_mel_kernels();    // mel_kernel_avx512.cpp (8 frames)

}  // namespace mmrt::media::detail
