// LLaVA's image encoder on the CPU kernels: the CLIP vision transformer (HF modeling_clip.py:
// Conv2d patch embedding without bias as one matrix multiply over (c, y, x) patch rows, the class
// token, learned positions, pre_layrnorm, pre-LN encoder layers with quick_gelu, bidirectional
// attention within each crop) run up to the selected hidden state (vision_feature_layer; the
// layers after it are never computed), the class token dropped ("default" strategy), then the
// multi_modal_projector (linear_1, exact GELU, linear_2) into the language model's width.
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "kernels/linear.h"
#include "models/encoder_block.h"
#include "models/llava/config.h"

namespace mmrt::io {
class SafeTensors;
}

namespace mmrt::models::llava {

// Every op the CLIP tower and its projector run.
inline constexpr kernels::Op kClipTowerOps[] = {
    kernels::Op::kPatchify2d, kernels::Op::kLinear,  kernels::Op::kEmbedding,
    kernels::Op::kCopy2d,     kernels::Op::kAdd,     kernels::Op::kLayerNorm,
    kernels::Op::kQuickGelu,  kernels::Op::kGeluErf, kernels::Op::kVarlenAttention};

class ClipTower {
 public:
  // Loads the vision tower and projector tensors (either naming) from a checked checkpoint.
  static std::unique_ptr<ClipTower> load(const kernels::Backend& be, const io::SafeTensors& st,
                                         const Config& cfg, const EncoderPrecision& precision);
  ~ClipTower();

  // pixel_values [n_crops, 3, S, S] f32 -> [n_crops * tokens_per_crop(), text hidden] f32, the
  // crops' projected features in order.
  Tensor forward(const Tensor& pixel_values) const;
  // forward() as a job of parts() parts (one per layer that runs, one for the projector,
  // BlockJob): the engine runs a large
  // image's encoder a few layers a step beside the decoding streams.
  std::unique_ptr<EncodeJob> begin(const Tensor& pixel_values) const;
  int64_t parts() const;

  int64_t tokens_per_crop() const;  // side² (+1 with the class token kept)
  // Floating-point operations of forward() for `n_crops` crops.
  double flops(int64_t n_crops) const;

 private:
  struct Impl;
  class Job;
  explicit ClipTower(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::models::llava
