// Decoding images to 8-bit RGB exactly as PIL's `Image.open(f).convert("RGB")` does: JPEG with
// libjpeg-turbo, PNG with libspng, WebP with libwebp. The format comes from the magic bytes, the
// size from the header, and images above the pixel limit are refused before anything is decoded.
// Every problem with the input is thrown as a core/error.h type naming it; nothing aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/buffer_cache.h"
#include "core/isa.h"

namespace mmrt {
class ThreadPool;
}

namespace mmrt::media {

enum class ImageFormat : uint8_t { kUnknown, kJpeg, kPng, kWebp, kGif, kBmp, kTiff, kHeif, kJxl };

std::string_view format_name(ImageFormat f);  // "JPEG", "PNG", ...
// Looks only at the leading bytes; kUnknown when nothing matches.
ImageFormat detect_format(std::span<const uint8_t> bytes);

// What media work runs on, chosen by the caller (a Backend, a media worker): threads for the
// row-parallel passes (null: the calling thread only), the highest kernel variant to use (the
// default lets the CPU decide) and the cache large buffers come from (empty: plain allocations).
struct MediaContext {
  ThreadPool* pool = nullptr;
  Isa isa = Isa::kAvx512Bf16;
  BufferCache buffers;
  // Where the encoder's input (a media item's features) is written; null: from `buffers`. A
  // media worker points it into the memory it shares with the server, so nothing is copied.
  std::function<std::shared_ptr<uint8_t>(size_t bytes)> features;
};

// A buffer for `bytes` of features: ctx.features when set, else ctx.buffers.
std::shared_ptr<uint8_t> features_buffer(const MediaContext& ctx, size_t bytes);

// Packed 8-bit RGB, row-major, stride 3 * width. The buffer keeps kTailPad writable bytes after
// the last pixel so vector kernels may read a little past a row end. Copies are deep and take
// their buffer from the same cache as the original.
class Image {
 public:
  static constexpr size_t kTailPad = 64;

  Image() = default;
  // Contents uninitialised (zeroed padding); the buffer comes from `buffers`.
  Image(int width, int height, const BufferCache& buffers = {});
  Image(const Image& other);
  Image& operator=(const Image& other);
  Image(Image&&) noexcept = default;
  Image& operator=(Image&&) noexcept = default;

  int width() const { return width_; }
  int height() const { return height_; }
  size_t stride() const { return static_cast<size_t>(width_) * 3; }
  size_t size_bytes() const { return stride() * static_cast<size_t>(height_); }
  bool empty() const { return width_ == 0 || height_ == 0; }

  uint8_t* data() { return buf_.get(); }
  const uint8_t* data() const { return buf_.get(); }
  uint8_t* row(int y) { return buf_.get() + stride() * static_cast<size_t>(y); }
  const uint8_t* row(int y) const { return buf_.get() + stride() * static_cast<size_t>(y); }

 private:
  int width_ = 0, height_ = 0;
  std::shared_ptr<uint8_t> buf_;
  BufferCache buffers_;
};

// `reference` reproduces PIL bit for bit; `fast` may decode a JPEG with libjpeg-turbo's scaled
// DCT (1/2, 1/4, 1/8) when the caller's target size allows it (see jpeg_scale_denominator).
enum class PreprocessMode { kReference, kFast };
std::string_view mode_name(PreprocessMode m);

struct DecodeOptions {
  // Refuse images with more pixels than this (ResourceExhausted), checked on the header. PIL
  // warns above 89 478 485 pixels and refuses twice that.
  uint64_t max_pixels = 50'000'000;
  PreprocessMode mode = PreprocessMode::kReference;
  // kFast only: the size the decoded image will be resized to (0 = unknown: full decode).
  int target_width = 0, target_height = 0;
  BufferCache buffers;  // where the decoded image's memory comes from
};

struct ImageInfo {
  ImageFormat format = ImageFormat::kUnknown;
  int width = 0, height = 0;
  // What the file stores, e.g. "YCbCr 4:2:0", "CMYK", "L", "P", "RGBA 16-bit", "lossy+alpha".
  std::string_view color;
};

// Parses the header only (size and colour model); throws the same errors as decode_image.
ImageInfo probe_image(std::span<const uint8_t> bytes, const DecodeOptions& opts = {});

// Full decode to RGB. Conversions follow PIL 9.4: L copies gray to R, G and B; P looks up the
// palette (missing entries are the gray ramp i -> (i, i, i)); alpha is dropped without
// compositing; 16-bit RGB(A)/LA keep the high byte; 16-bit L saturates at 255 (PIL's I -> RGB);
// CMYK JPEGs are read with Adobe (inverted) polarity. EXIF orientation is not applied (PIL's
// Image.open does not either).
Image decode_image(std::span<const uint8_t> bytes, const DecodeOptions& opts = {});

// The fast-mode rule: the largest d in {8, 4, 2} with width >= d * target_w and
// height >= d * target_h (the scaled image is still at least the target size, so the resize that
// follows still only downsamples); 1 when none fits or a target is 0. PIL's draft() uses the
// same test.
int jpeg_scale_denominator(int width, int height, int target_w, int target_h);

// Encodes packed 8-bit RGB (stride 3 * width) as a PNG file (synthetic images: load-time
// calibration, benchmarks). ResourceExhausted / InternalError when libspng fails.
std::vector<uint8_t> encode_png_rgb8(std::span<const uint8_t> rgb, int width, int height);

}  // namespace mmrt::media
