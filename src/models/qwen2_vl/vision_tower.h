// The Qwen2-VL vision tower on the CPU kernels: patch embedding (the Conv3d as one matrix
// multiply over the 1176-value patch rows), 2-D rotary positions from grid_thw, bidirectional
// attention within each image frame (segment descriptors, no masks), pre-LN blocks with a
// quick_gelu MLP, and the 2x2 patch merger into the language model's hidden size.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/linear.h"
#include "models/encoder_block.h"
#include "models/qwen2_vl/config.h"
#include "models/qwen2_vl/vision_runner.h"

namespace mmrt::io {
class SafeTensors;
}

namespace mmrt::models::qwen2_vl {

// Every op the vision tower runs.
inline constexpr kernels::Op kVisionTowerOps[] = {
    kernels::Op::kLayerNorm, kernels::Op::kLinear,
    kernels::Op::kQuickGelu, kernels::Op::kGeluErf,
    kernels::Op::kAdd,       kernels::Op::kRopeAngles,
    kernels::Op::kApplyRope, kernels::Op::kVarlenAttention};

// What both Qwen vision towers (Qwen2-VL's, Qwen2.5-VL's) check and derive of a batch of grids.
struct PatchGrid {
  int64_t n = 0;                   // patches
  std::vector<int32_t> positions;  // [2, n]: each patch's row, then column (merge-block order)
  std::vector<int32_t> frames;     // one attention segment per frame (temporal slice)
};
// Checks pixel_values (f32 [patches, patch_dim]) against `grids` (positive, h and w multiples
// of `merge`); InvalidArgument naming what disagrees.
PatchGrid patch_grid(const Tensor& pixel_values, std::span<const GridThw> grids, int64_t patch_dim,
                     int64_t merge);

class VisionTower final : public GridEncoder {
 public:
  // Loads the visual.* tensors (either naming convention) from an opened checkpoint whose
  // tensors were already checked, in `precision` (patch embedding and merger in its 16-bit
  // format).
  static std::unique_ptr<VisionTower> load(const kernels::Backend& be, const io::SafeTensors& st,
                                           const Config& cfg, const EncoderPrecision& precision);
  ~VisionTower();

  // pixel_values [sum_i t_i*h_i*w_i, C*T*p*p] f32 (rows in merge-block order per image, images
  // concatenated) -> image embeddings [sum_i t_i*h_i*w_i / merge², out_hidden] f32.
  // As a job of one part per block and one for the merger (BlockJob; the patch embedding runs
  // with the first); GridEncoder::forward runs it whole.
  std::unique_ptr<EncodeJob> begin(const Tensor& pixel_values,
                                   std::span<const GridThw> grids) override;
  int64_t parts() const override;

  int64_t patch_dim() const;  // C * T * p * p (1176)
  int64_t out_hidden() const;
  // Floating-point operations of forward() for one image of this grid (for GFLOP/s reports).
  double flops(const GridThw& grid) const override;

 private:
  struct Impl;
  class Job;
  explicit VisionTower(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::models::qwen2_vl
