// The Runner of the Qwen vision-language families (Qwen2-VL, Qwen2.5-VL): the shared decoder,
// and a vision tower over (t, h, w) patch grids whose 2-frame video slices are independent, so
// that a video is encoded slice by slice (bit-identical slices once, pruned tokens only).
#pragma once

#include <memory>
#include <span>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "models/decoder/decoder.h"
#include "models/model.h"
#include "models/qwen2_vl/config.h"

namespace mmrt::models::qwen2_vl {

// What the runner needs of a vision tower: its forward pass as a job of parts (BlockJob).
class GridEncoder {
 public:
  virtual ~GridEncoder() = default;
  // pixel_values [sum of t*h*w, patch_dim] f32 -> [sum of t*h*w / merge², out_hidden] f32, in
  // parts() parts.
  virtual std::unique_ptr<EncodeJob> begin(const Tensor& pixel_values,
                                           std::span<const GridThw> grids) = 0;
  virtual int64_t parts() const = 0;
  // The whole job at once.
  Tensor forward(const Tensor& pixel_values, std::span<const GridThw> grids) {
    return begin(pixel_values, grids)->run_rest();
  }
  // Floating-point operations of forward() for one item of this grid (0: unknown).
  virtual double flops(const GridThw& grid) const = 0;
};

// `merge`: spatial_merge_size (a token is merge x merge patches); `reuse_slices`:
// LoadOptions::video_slice_reuse. `family` names the model in errors ("qwen2-vl").
std::unique_ptr<Runner> make_vision_runner(const kernels::Backend& be, io::SafeTensors st,
                                           std::unique_ptr<Decoder> lm,
                                           std::unique_ptr<GridEncoder> tower, int64_t merge,
                                           bool reuse_slices, const char* family = "qwen2-vl");

}  // namespace mmrt::models::qwen2_vl
