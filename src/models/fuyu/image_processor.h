// Fuyu-8B image preprocessing, bit-identical with transformers' FuyuImageProcessor (PIL + numpy
// path) followed by FuyuProcessor's patch step (variable_sized=True):
//   decode to RGB (as PIL's convert("RGB")) -> downscale only, aspect kept, to fit `size`
//   (s = min(H_t / h, W_t / w), sides int(h * s), int(w * s), PIL resize) -> pad bottom / right
//   to `size` with padding_value on the uint8 image -> rescale (float32(v * factor) in double) ->
//   normalise ((x - mean) / std in float32) -> crop back to the resized size rounded up to whole
//   patches (never past the padded size) -> patches in raster order, each flattened (py, px, c).
// The padded image is never materialised: pixels of the crop outside the resized image are the
// normalised pad byte.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/tensor.h"
#include "media/image.h"
#include "media/resize.h"

namespace mmrt::models::fuyu {

// Limits on what a configuration and one image may ask for (checked before any allocation).
inline constexpr int64_t kMaxTargetSide = 16384;              // size.height / size.width
inline constexpr int64_t kMaxPatchSide = 1024;                // patch_size sides
inline constexpr int64_t kMaxPatches = int64_t{1} << 16;      // patches of one image
inline constexpr int64_t kMaxOutputBytes = int64_t{1} << 30;  // one image's patches (f32)
inline constexpr int64_t kMaxSourceSide = (int64_t{1} << 31) - 1;

struct ImageProcessorConfig {
  int64_t target_height = 1080, target_width = 1920;  // size
  int64_t patch_height = 30, patch_width = 30;        // patch_size
  // The pad value, stored into the uint8 image as numpy does (truncated): 1.0 is the byte 1, not
  // white. Must lie in [0, 255].
  double padding_value = 1.0;
  std::array<double, 3> image_mean{0.5, 0.5, 0.5}, image_std{0.5, 0.5, 0.5};
  double rescale_factor = 1.0 / 255.0;
  bool do_resize = true, do_pad = true, do_rescale = true, do_normalize = true;
  // transformers 4.x never forwards `resample` to the resize (always bilinear); the v5 PIL
  // backend does, and so does this.
  media::ResizeFilter resample = media::ResizeFilter::kBilinear;

  // Reads preprocessor_config.json (FuyuImageProcessor's keys: size {height, width}, patch_size
  // {height, width}, padding_value, padding_mode, image_mean / image_std as a number or 3 numbers,
  // rescale_factor, do_resize / do_pad / do_rescale / do_normalize, resample 2 = bilinear or
  // 3 = bicubic). Absent or null keys keep the defaults above; other keys are ignored. FormatError
  // for bad JSON, types or values (naming the key), Unimplemented for a padding_mode other than
  // "constant", another resample filter, or a size / patch_size key other than height and width.
  static ImageProcessorConfig from_json(std::string_view json_text, const std::string& origin);
  static ImageProcessorConfig load(const std::string& path);  // NotFound: missing file
};

struct ImageGeometry {
  int64_t resized_height = 0, resized_width = 0;  // after the downscale (= the original when none)
  int64_t rows = 0, cols = 0;                     // patch grid of the crop
  int64_t n_patches() const { return rows * cols; }
  // Each grid row: `cols` |SPEAKER| placeholders, then one |NEWLINE|.
  int64_t n_tokens() const { return rows * (cols + 1); }
};

// From the original size alone (what admission needs before decoding). InvalidArgument for a
// non-positive size or one over kMaxSourceSide, an invalid configuration, a downscale to zero
// rows or columns (an extremely thin image), an image larger than `size` with do_pad but not
// do_resize (numpy refuses the negative padding), a crop that is not a whole number of patches
// (transformers' get_num_patches refuses it), or more than kMaxPatches patches or
// kMaxOutputBytes of them.
ImageGeometry image_geometry(int64_t height, int64_t width, const ImageProcessorConfig& cfg);

struct ImageInputs {
  // [rows * cols, patch_h * patch_w * 3] f32, patches in raster order, each in (py, px, c) order.
  // Without do_rescale and do_normalize the values are the bytes themselves (transformers keeps
  // them uint8 then).
  Tensor patches;
  ImageGeometry geometry;
  int64_t height = 0, width = 0;  // decoded size
  double decode_ms = 0, preprocess_ms = 0;
};

struct PreprocessOptions {
  uint64_t max_source_pixels = media::DecodeOptions{}.max_pixels;  // decompression-bomb guard
  media::MediaContext ctx;  // pool / isa cap / buffers; the patches come from features_buffer
};

// From the file bytes: the header is probed and the geometry checked before anything is decoded;
// decode errors are media::decode_image's (FormatError, Unimplemented, ResourceExhausted past
// max_source_pixels, ...); then as below.
ImageInputs preprocess_image(std::span<const uint8_t> file_bytes, const ImageProcessorConfig& cfg,
                             const PreprocessOptions& opts = {});

// From a decoded RGB image. InvalidArgument for an empty image and as image_geometry.
ImageInputs preprocess_image(const media::Image& rgb, const ImageProcessorConfig& cfg,
                             const media::MediaContext& ctx = {});

}  // namespace mmrt::models::fuyu
