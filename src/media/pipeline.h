// Decode and resize in one streaming pass: decoded rows go straight into the horizontal resize
// pass (no full-resolution RGB buffer), then the vertical pass runs on the pool. In fast mode a
// JPEG is decoded at the DCT scale jpeg_scale_denominator() chooses for the target. Bit-exact
// with decode_image() followed by resize() in reference mode.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "media/image.h"
#include "media/resize.h"

namespace mmrt::media {

struct Size2 {
  int width = 0, height = 0;
};

struct DecodedResized {
  Image image;                                // the resized image
  ImageInfo source;                           // from the file header
  int decoded_width = 0, decoded_height = 0;  // after any DCT scaling
  int jpeg_scale_denom = 1;
  double decode_ms = 0;  // includes the horizontal resize pass, which runs per decoded row
  double resize_ms = 0;  // the vertical pass
};

// `target` maps the header's (width, height) to the output size (both > 0). Throws the
// decoder's errors (FormatError, Unimplemented, ResourceExhausted past opts.max_pixels, ...) and
// InvalidArgument for a non-positive target.
DecodedResized decode_resized(std::span<const uint8_t> bytes,
                              const std::function<Size2(int width, int height)>& target,
                              ResizeFilter filter, const DecodeOptions& opts,
                              const MediaContext& ctx);

}  // namespace mmrt::media
