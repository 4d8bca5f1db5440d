// Qwen2-VL / Qwen2.5-VL image preprocessing (HF Qwen2VLImageProcessor, PIL path): decode ->
// RGB -> smart_resize -> PIL bicubic -> fused rescale + normalise + temporal duplicate + patchify
// into pixel_values [N, C*T*p*p] f32 (rows in 2x2 merge-block order) and grid_thw.
// In `reference` mode the result is bit-identical to transformers' PIL + numpy implementation.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/tensor.h"
#include "media/image.h"
#include "media/resize.h"

namespace mmrt::models::qwen2_vl {

using media::Image;
using media::MediaContext;
using media::PreprocessMode;
using media::ResizeFilter;

struct ImageProcessorConfig {
  int64_t min_pixels = 56 * 56;         // size.shortest_edge
  int64_t max_pixels = 28 * 28 * 1280;  // size.longest_edge
  int patch_size = 14, temporal_patch_size = 2, merge_size = 2;
  std::array<double, 3> image_mean{0.48145466, 0.4578275, 0.40821073};  // OpenAI CLIP
  std::array<double, 3> image_std{0.26862954, 0.26130258, 0.27577711};
  double rescale_factor = 1.0 / 255.0;
  bool do_resize = true, do_rescale = true, do_normalize = true;
  ResizeFilter resample = ResizeFilter::kBicubic;

  int factor() const { return patch_size * merge_size; }

  // Reads preprocessor_config.json. Keys min_pixels / max_pixels win over size.shortest_edge /
  // size.longest_edge (as in transformers); absent keys keep the class defaults above. Throws
  // NotFound for a missing file, FormatError for bad JSON or values, Unimplemented for a
  // resample filter other than bilinear (2) or bicubic (3).
  static ImageProcessorConfig load(const std::string& preprocessor_config_json_path);
  static ImageProcessorConfig from_json(std::string_view json_text,
                                        const std::string& origin = "preprocessor_config.json");
};

struct ResizedSize {
  int64_t height = 0, width = 0;
};

// transformers' smart_resize, newer behaviour: no error for sides shorter than `factor`, and the
// max_pixels branch keeps at least `factor` per side (max(factor, ...)). Python round() is
// round-half-even. Throws InvalidArgument when max(h, w) / min(h, w) > 200 or a side is < 1.
ResizedSize smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                         int64_t max_pixels);

struct ImageInputs {
  Tensor pixel_values;  // [grid_t * grid_h * grid_w, C * T * p * p] f32
  int64_t grid_t = 0, grid_h = 0, grid_w = 0;
  int64_t merge_size = 2;
  int64_t n_tokens() const { return grid_t * grid_h * grid_w / (merge_size * merge_size); }
  Tensor grid_thw() const;  // [1, 3] i64

  // What happened, for logs and the CLI.
  int source_width = 0, source_height = 0;    // from the file header
  int decoded_width = 0, decoded_height = 0;  // after any DCT scaling (fast mode)
  int resized_width = 0, resized_height = 0;
  int jpeg_scale_denom = 1;
  double decode_ms = 0, resize_ms = 0, patchify_ms = 0;  // decode_ms includes the horizontal
                                                         // resize pass when it is fused
};

struct PreprocessOptions {
  PreprocessMode mode = PreprocessMode::kReference;
  uint64_t max_source_pixels = media::DecodeOptions{}.max_pixels;  // decompression-bomb guard
  MediaContext ctx;  // pool splits resize and patchify rows (decode is single-threaded)
  // Resize to exactly this size instead of smart_resize's (both > 0, multiples of the factor).
  int target_width = 0, target_height = 0;
};

// Whole pipeline from the file bytes. Decode and the horizontal resize pass stream row by row
// (no full-resolution RGB buffer); in fast mode a JPEG is decoded at the DCT scale chosen by
// jpeg_scale_denominator() for the smart_resize target.
ImageInputs preprocess_image(std::span<const uint8_t> file_bytes, const ImageProcessorConfig& cfg,
                             const PreprocessOptions& opts = {});

// The same from an already decoded RGB image (always reference-exact).
ImageInputs preprocess_image(const Image& rgb, const ImageProcessorConfig& cfg,
                             const MediaContext& ctx = {});

// The fused last step alone: rescale + normalise + temporal duplicate + patchify of a resized
// image whose sides are multiples of patch_size * merge_size.
Tensor patchify(const Image& resized, const ImageProcessorConfig& cfg,
                const MediaContext& ctx = {});

// One temporal slice of it into `out` ([grid_h * grid_w, C * T * p * p]): frame t of `frames`
// (1 to T frames of the same size) fills the t-th temporal column block; a slice of fewer than T
// frames repeats its last one (an image is a slice of one frame).
void patchify_slice(std::span<const Image* const> frames, const ImageProcessorConfig& cfg,
                    float* out, const MediaContext& ctx = {});

}  // namespace mmrt::models::qwen2_vl
