// LLaVA image preprocessing, bit-identical with transformers' PIL + numpy path:
// - LLaVA-NeXT (LlavaNextImageProcessor, "anyres"): the image squashed to shortest_edge x
//   shortest_edge (the base crop), then the image fitted into the best grid pinpoint (bicubic,
//   aspect kept), zero-padded on the uint8 image to the pinpoint and cut into crop_height tiles,
//   row by row;
// - LLaVA-1.5 (CLIPImageProcessor): the image alone.
// Every crop then goes through the CLIP steps: shortest-edge resize, centre crop (zero-padded
// when the image is smaller), rescale in double then float32, normalise in float32.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "media/image.h"
#include "media/resize.h"
#include "models/llava/anyres.h"

namespace mmrt::models::llava {

// The most crops (base + tiles) one image may become; larger grids are refused.
inline constexpr int64_t kMaxCrops = 64;

struct ImageProcessorConfig {
  int64_t shortest_edge = 336;  // size.shortest_edge
  // size {"height", "width"} when non-zero (wins over shortest_edge): the CLIP resize goes to
  // exactly this size. In anyres mode both must be equal (the base crop's side).
  int64_t size_height = 0, size_width = 0;
  int64_t crop_height = 336, crop_width = 336;  // crop_size; anyres tiles are crop_height square
  std::vector<Resolution> grid_pinpoints;       // image_grid_pinpoints, (height, width); empty: no
                                                // anyres (LLaVA-1.5)
  std::array<double, 3> image_mean{0.48145466, 0.4578275, 0.40821073};  // OpenAI CLIP
  std::array<double, 3> image_std{0.26862954, 0.26130258, 0.27577711};
  double rescale_factor = 1.0 / 255.0;
  bool do_resize = true, do_center_crop = true, do_rescale = true, do_normalize = true;
  media::ResizeFilter resample = media::ResizeFilter::kBicubic;

  // Reads preprocessor_config.json; absent keys keep the values above (the released
  // checkpoints', not the classes' 224 defaults). `anyres` true reads LlavaNextImageProcessor's
  // keys (image_grid_pinpoints, transformers' default list when absent), false
  // CLIPImageProcessor's (pinpoints ignored, left empty). size may be {"shortest_edge": N},
  // {"height": H, "width": W}, an int or [H, W]; crop_size {"height", "width"} or an int.
  // FormatError for bad JSON or values, Unimplemented for a size key or resample filter that is
  // not supported (2 = bilinear and 3 = bicubic are).
  static ImageProcessorConfig from_json(std::string_view json_text, const std::string& origin,
                                        bool anyres);
  static ImageProcessorConfig load(const std::string& path, bool anyres);  // NotFound: missing
};

struct ImageInputs {
  // [n_crops, 3, H, W] f32: the base crop first, then the tiles row by row. H x W is
  // crop_height x crop_width (with do_center_crop).
  Tensor pixel_values;
  Resolution original;  // decoded (height, width): HF image_sizes
  Resolution best;      // anyres: the chosen pinpoint (0 x 0 without anyres)
  Resolution fitted;    // anyres: the image's size inside it, before the zero padding
  double decode_ms = 0, preprocess_ms = 0;
};

struct PreprocessOptions {
  uint64_t max_source_pixels = media::DecodeOptions{}.max_pixels;  // decompression-bomb guard
  media::MediaContext ctx;  // pool / isa cap / buffers for the resizes and the output
};

// From the file bytes: decode to RGB (errors as media::decode_image throws them), then as below.
ImageInputs preprocess_image(std::span<const uint8_t> file_bytes, const ImageProcessorConfig& cfg,
                             const PreprocessOptions& opts = {});

// From a decoded RGB image. InvalidArgument for an empty image, an invalid configuration, more
// than kMaxCrops crops, or an intermediate image too large to allocate (a shortest-edge resize
// of an extremely thin image).
ImageInputs preprocess_image(const media::Image& rgb, const ImageProcessorConfig& cfg,
                             const media::MediaContext& ctx = {});

}  // namespace mmrt::models::llava
