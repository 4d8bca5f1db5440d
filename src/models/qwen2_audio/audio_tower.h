// Qwen2-Audio's Whisper-style audio tower on the CPU kernels, with the multi-modal projector:
// conv1 (k3, s1, p1) and conv2 (k3, s2, p1) as im2col + GEMM, each followed by exact GELU, the
// stored position table, pre-LN encoder layers (q scaled by head_dim^-0.5 inside the attention,
// k_proj without bias, LayerNorm eps 1e-5, exact-GELU MLP), AvgPool1d(2, 2), then the final
// layer_norm, then multi_modal_projector.linear.
//
// One window = one HF input_features row [n_mels, 2 * max_source_positions], padded as the
// feature extractor pads it; `valid_frames` is its feature attention mask's sum L. HF masks the
// keys at encoder rows >= V = (L - 1) // 2 + 1 for every query. Rows < V therefore never read a
// row >= V (attention sees keys < V, everything else is per row), and the kept tokens
// (pooled rows < (V - 2) // 2 + 1 = V / 2) read rows < V only: the tower computes the first V
// rows exactly as HF does and skips the rest. forward_all() computes every row, padded queries
// included, with the key mask, as HF does (tests compare both).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/linear.h"
#include "models/encoder_block.h"
#include "models/qwen2_audio/config.h"

namespace mmrt::io {
class SafeTensors;
}

namespace mmrt::models::qwen2_audio {

// Every op the audio tower runs.
inline constexpr kernels::Op kAudioTowerOps[] = {
    kernels::Op::kIm2col1d,  kernels::Op::kLinear, kernels::Op::kGeluErf,        kernels::Op::kAdd,
    kernels::Op::kLayerNorm, kernels::Op::kCopy2d, kernels::Op::kVarlenAttention};

class AudioTower {
 public:
  // Loads audio_tower.* and multi_modal_projector.* from an opened checkpoint whose tensors were
  // already checked. Kernels run on `be`, which must outlive the tower.
  static std::unique_ptr<AudioTower> load(const kernels::Backend& be, const io::SafeTensors& st,
                                          const Config& cfg, const EncoderPrecision& precision);
  ~AudioTower();

  // mel: one window [n_mels, n_frames] f32; valid_frames in [0, n_frames]. Returns the projected
  // audio tokens [audio_tokens(valid_frames), text hidden] f32 (0 rows below 3 valid frames).
  // InvalidArgument for a wrong size or frame count.
  Tensor forward(std::span<const float> mel, int64_t valid_frames) const;
  // The same window with every row computed (padded queries too, keys >= V masked): the
  // projector's output for all max_source_positions / 2 pooled rows [750, text hidden]. Needs
  // valid_frames >= 1 (with no valid key the HF softmax is NaN).
  Tensor forward_all(std::span<const float> mel, int64_t valid_frames) const;
  // forward() as a job of parts() parts (one per layer, one for the projector, BlockJob; `mel`
  // must outlive it): the engine runs
  // a long clip's encoder a few layers a step beside the decoding streams.
  std::unique_ptr<EncodeJob> begin(std::span<const float> mel, int64_t valid_frames) const;
  int64_t parts() const;

  int64_t n_mels() const;
  int64_t n_frames() const;  // 2 * max_source_positions
  int64_t out_hidden() const;
  // Floating-point operations of forward() for one window with `valid_frames` valid frames.
  double flops(int64_t valid_frames) const;

 private:
  struct Impl;
  class Job;
  explicit AudioTower(std::unique_ptr<Impl> impl);
  Tensor run(std::span<const float> mel, int64_t valid_frames, bool all_rows) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::models::qwen2_audio
