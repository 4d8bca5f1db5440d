// The Qwen2.5-VL vision tower on the CPU kernels: Qwen2-VL's patch embedding and 2-D rotary,
// RMSNorm blocks with a gated SiLU MLP (the shared EncoderBlock), and window attention: the
// patches are reordered so that each window of window_tokens x window_tokens merged tokens is
// contiguous, most blocks attend within their window (segments of the varlen attention: a mask
// descriptor, no mask), the blocks in fullatt_block_indexes within their frame; the RMSNorm
// merger, then the merged tokens restored to the image's order.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/linear.h"
#include "models/encoder_block.h"
#include "models/qwen2_5_vl/config.h"
#include "models/qwen2_vl/vision_runner.h"

namespace mmrt::io {
class SafeTensors;
}

namespace mmrt::models::qwen2_5_vl {

using qwen2_vl::GridThw;

// Every op the vision tower runs.
inline constexpr kernels::Op kVisionTowerOps[] = {
    kernels::Op::kRmsNorm,   kernels::Op::kLinear,
    kernels::Op::kSiluMul,   kernels::Op::kGeluErf,
    kernels::Op::kAdd,       kernels::Op::kRopeAngles,
    kernels::Op::kApplyRope, kernels::Op::kVarlenAttention,
    kernels::Op::kCopy2d};

// HF get_window_index for a batch of grids (their merged tokens in merge-block order, images
// one after another): `index[j]` is the merged token at window position j (windows of
// window_tokens x window_tokens merged tokens, row-major per frame, those at the right and
// bottom edges cut short); `cu_window` the window boundaries in patch rows (empty windows
// dropped); `cu_frame` the frames' (full attention), in the same order.
struct WindowOrder {
  std::vector<int32_t> index;
  std::vector<int32_t> cu_window, cu_frame;
};
WindowOrder window_order(std::span<const GridThw> grids, const VisionConfig& vc);

class VisionTower final : public qwen2_vl::GridEncoder {
 public:
  // Loads the visual.* tensors (either naming convention) from an opened checkpoint whose
  // tensors were already checked, in `precision` (patch embedding and merger in its 16-bit
  // format).
  static std::unique_ptr<VisionTower> load(const kernels::Backend& be, const io::SafeTensors& st,
                                           const Config& cfg, const EncoderPrecision& precision);
  ~VisionTower();

  // pixel_values [sum_i t_i*h_i*w_i, C*T*p*p] f32 (rows in merge-block order per image, as the
  // Qwen2-VL image processor writes them) -> embeddings [sum_i t_i*h_i*w_i / merge²,
  // out_hidden_size] f32, in the same token order.
  // As a job of one part per block and one for the merger (BlockJob; the patch embedding runs
  // with the first); GridEncoder::forward runs it whole.
  std::unique_ptr<EncodeJob> begin(const Tensor& pixel_values,
                                   std::span<const GridThw> grids) override;
  int64_t parts() const override;

  int64_t patch_dim() const;  // C * T * p * p (1176)
  // Floating-point operations of forward() for one image of this grid (for GFLOP/s reports).
  double flops(const GridThw& grid) const override;

 private:
  struct Impl;
  class Job;
  explicit VisionTower(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::models::qwen2_5_vl
