// Internal seam between the format decoders and whoever consumes their rows (a whole Image, or
// the streaming resizer of the preprocessing pipeline). Not part of the public API.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "media/image.h"

namespace mmrt::media::detail {

// A decoder may hold the buffers of up to this many rows before calling row_done on them.
constexpr int kMaxRowsInFlight = 16;

// Receives decoded packed-RGB rows top to bottom. A decoder asks for the buffer of row y, writes
// 3 * width bytes into it, then calls row_done(y). Rows arrive strictly in order, each exactly
// once; buffers of the last kMaxRowsInFlight requested rows must stay valid until their row_done.
class RowSink {
 public:
  virtual ~RowSink() = default;
  // Called once, before any row, with the size of the decoded image (after DCT scaling).
  virtual void begin(int width, int height) = 0;
  virtual uint8_t* row_buffer(int y) = 0;
  virtual void row_done(int y) = 0;
};

struct Header {
  ImageInfo info;
  bool interlaced = false;  // PNG Adam7 / progressive JPEG (informational)
};

// Each reads the header (throwing on a bad one) without decoding pixels.
Header jpeg_header(std::span<const uint8_t> bytes);
Header png_header(std::span<const uint8_t> bytes);
Header webp_header(std::span<const uint8_t> bytes);

// Each decodes the whole image into `sink`. The caller has already checked the pixel limit on
// the header. `scale_denom` (JPEG only) is 1, 2, 4 or 8.
void jpeg_decode(std::span<const uint8_t> bytes, int scale_denom, RowSink& sink);
void png_decode(std::span<const uint8_t> bytes, RowSink& sink);
void webp_decode(std::span<const uint8_t> bytes, RowSink& sink);

// Reads the header of any supported format and enforces opts.max_pixels; throws FormatError /
// Unimplemented / ResourceExhausted / InvalidArgument with a message naming the problem.
Header checked_header(std::span<const uint8_t> bytes, const DecodeOptions& opts);

// Decodes with the fast-mode DCT scale chosen from opts (the header must come from
// checked_header on the same bytes).
void decode_into(std::span<const uint8_t> bytes, const Header& h, const DecodeOptions& opts,
                 RowSink& sink);

}  // namespace mmrt::media::detail
