// PNG decoding with libspng in the file's own format (SPNG_FMT_PNG: no gamma, no transparency
// applied), then converted to RGB row by row the way PIL 9.4 opens and converts each PNG mode.
// Non-interlaced images stream scanline by scanline; Adam7 images are decoded whole first.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <spng.h>

#include "core/error.h"
#include "media/decode_internal.h"

namespace mmrt::media::detail {
namespace {

struct CtxDeleter {
  void operator()(spng_ctx* c) const { spng_ctx_free(c); }
};
using Ctx = std::unique_ptr<spng_ctx, CtxDeleter>;

[[noreturn]] void throw_spng(int err, const char* what) {
  std::string msg = std::string(spng_strerror(err)) + " (" + what + ")";
  if (err == SPNG_IO_EOF || err == SPNG_EOF || err == SPNG_EIDAT_TOO_SHORT)
    throw FormatError("truncated PNG: the data ends early: " + msg);
  if (err == SPNG_EMEM) throw ResourceExhausted("PNG decoder out of memory: " + msg);
  throw FormatError("corrupt PNG: " + msg);
}

Ctx open_ctx(std::span<const uint8_t> bytes, spng_ihdr* ihdr) {
  Ctx ctx(spng_ctx_new(0));
  if (!ctx) throw ResourceExhausted("PNG decoder: cannot allocate a context");
  // Ancillary chunks (text, ICC, EXIF) are bounded so a small file cannot demand huge memory.
  spng_set_chunk_limits(ctx.get(), size_t{64} << 20, size_t{256} << 20);
  if (int e = spng_set_png_buffer(ctx.get(), bytes.data(), bytes.size())) throw_spng(e, "buffer");
  if (int e = spng_get_ihdr(ctx.get(), ihdr)) throw_spng(e, "header");
  return ctx;
}

std::string_view color_name(const spng_ihdr& h) {
  bool deep = h.bit_depth == 16;
  switch (h.color_type) {
    case SPNG_COLOR_TYPE_GRAYSCALE:
      return deep ? "L 16-bit" : h.bit_depth == 1 ? "1" : h.bit_depth < 8 ? "L low-bit" : "L";
    case SPNG_COLOR_TYPE_TRUECOLOR:
      return deep ? "RGB 16-bit" : "RGB";
    case SPNG_COLOR_TYPE_INDEXED:
      return "P";
    case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA:
      return deep ? "LA 16-bit" : "LA";
    case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA:
      return deep ? "RGBA 16-bit" : "RGBA";
    default:
      return "unknown";
  }
}

// Converts one scanline in the PNG's own layout (16-bit samples host-endian, sub-byte samples
// packed MSB first) to packed RGB.
class RowConverter {
 public:
  RowConverter(const spng_ihdr& h, const spng_plte* plte) : h_(h) {
    if (h.color_type == SPNG_COLOR_TYPE_INDEXED) {
      // PIL's palette starts as the gray ramp and the PLTE entries overwrite its head.
      for (int i = 0; i < 256; ++i) pal_[i][0] = pal_[i][1] = pal_[i][2] = static_cast<uint8_t>(i);
      for (uint32_t i = 0; plte && i < plte->n_entries && i < 256; ++i) {
        pal_[i][0] = plte->entries[i].red;
        pal_[i][1] = plte->entries[i].green;
        pal_[i][2] = plte->entries[i].blue;
      }
    }
  }

  void convert(const uint8_t* in, uint8_t* out, int w) const {
    const int depth = h_.bit_depth;
    const auto* in16 = reinterpret_cast<const uint16_t*>(in);
    switch (h_.color_type) {
      case SPNG_COLOR_TYPE_GRAYSCALE:
        if (depth == 16) {  // PIL mode I (16-bit) -> RGB saturates at 255
          for (int x = 0; x < w; ++x) put_gray(out, x, in16[x] > 255 ? 255 : in16[x]);
        } else if (depth == 8) {
          for (int x = 0; x < w; ++x) put_gray(out, x, in[x]);
        } else {  // 1 -> mode "1" (0/255), 2 -> L;2 (x85), 4 -> L;4 (x17)
          const int scale = depth == 1 ? 255 : depth == 2 ? 85 : 17;
          for (int x = 0; x < w; ++x)
            put_gray(out, x, static_cast<uint8_t>(sample(in, x, depth) * scale));
        }
        break;
      case SPNG_COLOR_TYPE_TRUECOLOR:
        if (depth == 16) {
          for (int i = 0; i < 3 * w; ++i) out[i] = static_cast<uint8_t>(in16[i] >> 8);
        } else {
          std::memcpy(out, in, static_cast<size_t>(3) * w);
        }
        break;
      case SPNG_COLOR_TYPE_INDEXED:
        for (int x = 0; x < w; ++x) {
          const uint8_t* p = pal_[depth == 8 ? in[x] : sample(in, x, depth)];
          out[3 * x] = p[0], out[3 * x + 1] = p[1], out[3 * x + 2] = p[2];
        }
        break;
      case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA:  // alpha dropped
        for (int x = 0; x < w; ++x)
          put_gray(out, x, depth == 16 ? static_cast<uint8_t>(in16[2 * x] >> 8) : in[2 * x]);
        break;
      case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA:  // alpha dropped
        for (int x = 0; x < w; ++x)
          for (int c = 0; c < 3; ++c)
            out[3 * x + c] =
                depth == 16 ? static_cast<uint8_t>(in16[4 * x + c] >> 8) : in[4 * x + c];
        break;
      default:
        throw FormatError("corrupt PNG: colour type " + std::to_string(h_.color_type));
    }
  }

 private:
  static uint8_t sample(const uint8_t* in, int x, int depth) {
    const int per_byte = 8 / depth;
    const int shift = 8 - depth * (x % per_byte + 1);
    return static_cast<uint8_t>((in[x / per_byte] >> shift) & ((1 << depth) - 1));
  }
  static void put_gray(uint8_t* out, int x, int v) {
    out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = static_cast<uint8_t>(v);
  }

  spng_ihdr h_;
  uint8_t pal_[256][3] = {};
};

}  // namespace

Header png_header(std::span<const uint8_t> bytes) {
  spng_ihdr ihdr{};
  Ctx ctx = open_ctx(bytes, &ihdr);
  Header h;
  h.info.format = ImageFormat::kPng;
  // spng limits IHDR sizes to 2^31 - 1, so the casts are safe.
  h.info.width = static_cast<int>(ihdr.width);
  h.info.height = static_cast<int>(ihdr.height);
  h.info.color = color_name(ihdr);
  h.interlaced = ihdr.interlace_method != 0;
  return h;
}

void png_decode(std::span<const uint8_t> bytes, RowSink& sink) {
  spng_ihdr ihdr{};
  Ctx ctx = open_ctx(bytes, &ihdr);
  const int w = static_cast<int>(ihdr.width), h = static_cast<int>(ihdr.height);
  size_t total = 0;
  if (int e = spng_decoded_image_size(ctx.get(), SPNG_FMT_PNG, &total)) throw_spng(e, "size");
  const size_t row_bytes = total / static_cast<size_t>(h);

  spng_plte plte{};
  bool have_plte = false;
  if (ihdr.color_type == SPNG_COLOR_TYPE_INDEXED) {
    // PLTE comes before IDAT; the getter reads the chunks up to the image data.
    int e = spng_get_plte(ctx.get(), &plte);
    if (e && e != SPNG_ECHUNKAVAIL) throw_spng(e, "palette");
    have_plte = e == 0;
    if (!have_plte) throw FormatError("corrupt PNG: indexed-colour image without a PLTE chunk");
  }
  RowConverter conv(ihdr, have_plte ? &plte : nullptr);
  sink.begin(w, h);

  if (ihdr.interlace_method == 0) {
    if (int e = spng_decode_image(ctx.get(), nullptr, 0, SPNG_FMT_PNG, SPNG_DECODE_PROGRESSIVE))
      throw_spng(e, "start");
    std::vector<uint8_t> row(row_bytes + 16);
    for (int y = 0; y < h; ++y) {
      int e = spng_decode_scanline(ctx.get(), row.data(), row_bytes);
      if (e && !(e == SPNG_EOI && y == h - 1)) throw_spng(e, "image data");
      conv.convert(row.data(), sink.row_buffer(y), w);
      sink.row_done(y);
    }
  } else {
    std::vector<uint8_t> all(total + 16);
    if (int e = spng_decode_image(ctx.get(), all.data(), total, SPNG_FMT_PNG, 0))
      throw_spng(e, "image data");
    for (int y = 0; y < h; ++y) {
      conv.convert(all.data() + row_bytes * static_cast<size_t>(y), sink.row_buffer(y), w);
      sink.row_done(y);
    }
  }
}

}  // namespace mmrt::media::detail

namespace mmrt::media {

std::vector<uint8_t> encode_png_rgb8(std::span<const uint8_t> rgb, int width, int height) {
  if (width <= 0 || height <= 0 ||
      rgb.size() != static_cast<size_t>(width) * static_cast<size_t>(height) * 3)
    throw InvalidArgument("encode_png_rgb8: " + std::to_string(rgb.size()) + " bytes for " +
                          std::to_string(width) + " x " + std::to_string(height) + " RGB");
  std::unique_ptr<spng_ctx, decltype(&spng_ctx_free)> ctx(spng_ctx_new(SPNG_CTX_ENCODER),
                                                          &spng_ctx_free);
  if (!ctx) throw ResourceExhausted("cannot create a PNG encoder");
  spng_set_option(ctx.get(), SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(width);
  ihdr.height = static_cast<uint32_t>(height);
  ihdr.bit_depth = 8;
  ihdr.color_type = SPNG_COLOR_TYPE_TRUECOLOR;
  spng_set_ihdr(ctx.get(), &ihdr);
  int err =
      spng_encode_image(ctx.get(), rgb.data(), rgb.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  size_t n = 0;
  void* buf = err ? nullptr : spng_get_png_buffer(ctx.get(), &n, &err);
  if (!buf) throw InternalError(std::string("PNG encoding failed: ") + spng_strerror(err));
  std::vector<uint8_t> out(static_cast<uint8_t*>(buf), static_cast<uint8_t*>(buf) + n);
  std::free(buf);
  return out;
}

}  // namespace mmrt::media
