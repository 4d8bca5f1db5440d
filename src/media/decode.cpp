// Format detection, the pixel-limit guard and the decode_image / probe_image entry points.
#include <cstdio>
#include <cstring>
#include <string>

#include "core/error.h"
#include "media/decode_internal.h"
#include "media/image.h"

namespace mmrt::media {

std::shared_ptr<uint8_t> features_buffer(const MediaContext& ctx, size_t bytes) {
  return ctx.features ? ctx.features(bytes) : ctx.buffers.get(bytes);
}

Image::Image(int width, int height, const BufferCache& buffers)
    : width_(width), height_(height), buffers_(buffers) {
  if (width < 0 || height < 0) throw InvalidArgument("Image: negative size");
  buf_ = buffers_.get(size_bytes() + kTailPad);
  std::memset(buf_.get() + size_bytes(), 0, kTailPad);
}

Image::Image(const Image& other) : Image(other.width_, other.height_, other.buffers_) {
  if (other.buf_) std::memcpy(buf_.get(), other.buf_.get(), size_bytes());
}

Image& Image::operator=(const Image& other) {
  if (this != &other) *this = Image(other);
  return *this;
}

std::string_view format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kGif:
      return "GIF";
    case ImageFormat::kBmp:
      return "BMP";
    case ImageFormat::kTiff:
      return "TIFF";
    case ImageFormat::kHeif:
      return "HEIF/AVIF";
    case ImageFormat::kJxl:
      return "JPEG XL";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

std::string_view mode_name(PreprocessMode m) {
  return m == PreprocessMode::kFast ? "fast" : "reference";
}

ImageFormat detect_format(std::span<const uint8_t> b) {
  auto starts = [&](const char* magic, size_t n, size_t at = 0) {
    return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
  };
  if (starts("\xff\xd8\xff", 3)) return ImageFormat::kJpeg;
  if (starts("\x89PNG\r\n\x1a\n", 8)) return ImageFormat::kPng;
  if (starts("RIFF", 4) && starts("WEBP", 4, 8)) return ImageFormat::kWebp;
  if (starts("GIF87a", 6) || starts("GIF89a", 6)) return ImageFormat::kGif;
  if (starts("BM", 2)) return ImageFormat::kBmp;
  if (starts("II*\0", 4) || starts("MM\0*", 4)) return ImageFormat::kTiff;
  // ISO base media files: HEIF/AVIF by their brand; others (MP4, QuickTime) are not images.
  if (starts("ftyp", 4, 4)) {
    for (const char* brand :
         {"heic", "heix", "hevc", "hevx", "heim", "heis", "mif1", "msf1", "avif", "avis"})
      if (starts(brand, 4, 8)) return ImageFormat::kHeif;
    return ImageFormat::kUnknown;
  }
  if (starts("\xff\x0a", 2) || starts("\0\0\0\x0cJXL \r\n\x87\n", 12)) return ImageFormat::kJxl;
  return ImageFormat::kUnknown;
}

// What a file that is not an image is, when it is something common (the usual cause: a file
// given as the wrong kind of part). Never its bytes: a fetched body is not quoted back.
std::string not_image_hint(std::span<const uint8_t> b) {
  auto starts = [&](const char* magic, size_t n, size_t at = 0) {
    return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
  };
  if (starts("RIFF", 4) && starts("WAVE", 4, 8)) return ": the data is a WAV audio file";
  if (starts("ftyp", 4, 4)) return ": the data is an MP4/QuickTime video (send it as a video part)";
  if (starts("\x1a\x45\xdf\xa3", 4)) return ": the data is a Matroska/WebM video";
  if (starts("ID3", 3) || starts("\xff\xfb", 2) || starts("\xff\xf3", 2))
    return ": the data is an MP3 audio file";
  if (starts("fLaC", 4)) return ": the data is a FLAC audio file";
  if (starts("OggS", 4)) return ": the data is an Ogg file";
  return "";
}

// The format whose signature `b` is a proper prefix of (a file cut inside its first bytes).
const char* truncated_signature(std::span<const uint8_t> b) {
  const auto prefix_of = [&](std::string_view sig, size_t at = 0) {
    if (b.size() <= at) return true;
    const size_t n = std::min(b.size() - at, sig.size());
    return std::memcmp(b.data() + at, sig.data(), n) == 0;
  };
  using namespace std::string_view_literals;
  if (b.size() < 3 && prefix_of("\xff\xd8\xff"sv)) return "JPEG";
  if (b.size() < 8 && prefix_of("\x89PNG\r\n\x1a\n"sv)) return "PNG";
  if (b.size() < 12 && prefix_of("RIFF"sv) && prefix_of("WEBP"sv, 8)) return "WebP";
  return nullptr;
}

int jpeg_scale_denominator(int width, int height, int target_w, int target_h) {
  if (target_w <= 0 || target_h <= 0) return 1;
  for (int d : {8, 4, 2}) {
    if (static_cast<int64_t>(width) >= static_cast<int64_t>(d) * target_w &&
        static_cast<int64_t>(height) >= static_cast<int64_t>(d) * target_h)
      return d;
  }
  return 1;
}

namespace detail {
namespace {

std::string mpix(uint64_t pixels) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f Mpixel", static_cast<double>(pixels) / 1e6);
  return buf;
}

// Writes the rows straight into an Image.
class ImageSink final : public RowSink {
 public:
  explicit ImageSink(const BufferCache& buffers) : buffers_(buffers) {}
  void begin(int width, int height) override { image = Image(width, height, buffers_); }
  uint8_t* row_buffer(int y) override { return image.row(y); }
  void row_done(int) override {}
  Image image;

 private:
  BufferCache buffers_;
};

}  // namespace

Header checked_header(std::span<const uint8_t> bytes, const DecodeOptions& opts) {
  if (bytes.empty()) throw InvalidArgument("empty image: 0 bytes");
  ImageFormat f = detect_format(bytes);
  Header h;
  switch (f) {
    case ImageFormat::kJpeg:
      h = jpeg_header(bytes);
      break;
    case ImageFormat::kPng:
      h = png_header(bytes);
      break;
    case ImageFormat::kWebp:
      h = webp_header(bytes);
      break;
    case ImageFormat::kUnknown:
      if (const char* cut = truncated_signature(bytes))
        throw FormatError("truncated " + std::string(cut) + " file: only " +
                          std::to_string(bytes.size()) + " bytes, shorter than its signature");
      throw FormatError("unrecognised image data: expected a JPEG, PNG or WebP file" +
                        not_image_hint(bytes));
    default:
      throw Unimplemented("unsupported image format " + std::string(format_name(f)) +
                          ": mmrt decodes JPEG, PNG and WebP");
  }
  if (h.info.width <= 0 || h.info.height <= 0)
    throw FormatError("corrupt " + std::string(format_name(f)) + ": image size " +
                      std::to_string(h.info.width) + "x" + std::to_string(h.info.height));
  uint64_t pixels = static_cast<uint64_t>(h.info.width) * static_cast<uint64_t>(h.info.height);
  if (pixels > opts.max_pixels)
    throw ResourceExhausted("image is " + std::to_string(h.info.width) + "x" +
                            std::to_string(h.info.height) + " = " + mpix(pixels) +
                            ", above the limit of " + mpix(opts.max_pixels) + " (" +
                            std::to_string(opts.max_pixels) + " pixels)");
  return h;
}

void decode_into(std::span<const uint8_t> bytes, const Header& h, const DecodeOptions& opts,
                 RowSink& sink) {
  switch (h.info.format) {
    case ImageFormat::kJpeg: {
      int d = 1;
      if (opts.mode == PreprocessMode::kFast)
        d = jpeg_scale_denominator(h.info.width, h.info.height, opts.target_width,
                                   opts.target_height);
      jpeg_decode(bytes, d, sink);
      return;
    }
    case ImageFormat::kPng:
      png_decode(bytes, sink);
      return;
    case ImageFormat::kWebp:
      webp_decode(bytes, sink);
      return;
    default:
      break;
  }
  throw InternalError("decode_into: unexpected format");
}

}  // namespace detail

ImageInfo probe_image(std::span<const uint8_t> bytes, const DecodeOptions& opts) {
  return detail::checked_header(bytes, opts).info;
}

Image decode_image(std::span<const uint8_t> bytes, const DecodeOptions& opts) {
  detail::Header h = detail::checked_header(bytes, opts);
  detail::ImageSink sink(opts.buffers);
  detail::decode_into(bytes, h, opts, sink);
  return std::move(sink.image);
}

}  // namespace mmrt::media
