// WebP decoding with libwebp's advanced API straight to RGB (alpha dropped, fancy upsampling on,
// as PIL 9.4's WebPAnimDecoder path decodes a still image). Animated files are refused.
#include <algorithm>
#include <string>
#include <vector>

#include <webp/decode.h>

#include "core/error.h"
#include "media/decode_internal.h"

namespace mmrt::media::detail {
namespace {

[[noreturn]] void throw_webp(VP8StatusCode st, const char* what) {
  std::string where = std::string(" (") + what + ")";
  switch (st) {
    case VP8_STATUS_NOT_ENOUGH_DATA:
      throw FormatError("truncated WebP: the data ends early" + where);
    case VP8_STATUS_OUT_OF_MEMORY:
      throw ResourceExhausted("WebP decoder out of memory" + where);
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      throw Unimplemented("WebP feature not supported by libwebp" + where);
    case VP8_STATUS_INVALID_PARAM:
      throw FormatError("corrupt WebP: invalid parameter" + where);
    default:
      throw FormatError("corrupt WebP: bitstream error" + where);
  }
}

WebPBitstreamFeatures features(std::span<const uint8_t> bytes) {
  WebPBitstreamFeatures f;
  VP8StatusCode st = WebPGetFeatures(bytes.data(), bytes.size(), &f);
  if (st != VP8_STATUS_OK) throw_webp(st, "header");
  if (f.has_animation) throw Unimplemented("animated WebP is not supported");
  return f;
}

}  // namespace

Header webp_header(std::span<const uint8_t> bytes) {
  WebPBitstreamFeatures f = features(bytes);
  Header h;
  h.info.format = ImageFormat::kWebp;
  h.info.width = f.width;
  h.info.height = f.height;
  if (f.format == 2)
    h.info.color = f.has_alpha ? "lossless+alpha" : "lossless";
  else
    h.info.color = f.has_alpha ? "lossy+alpha" : "lossy";
  return h;
}

void webp_decode(std::span<const uint8_t> bytes, RowSink& sink) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) throw InternalError("libwebp version mismatch");
  config.input = features(bytes);
  const int w = config.input.width, h = config.input.height;
  const size_t stride = static_cast<size_t>(w) * 3;
  std::vector<uint8_t> buf(stride * static_cast<size_t>(h));
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = buf.data();
  config.output.u.RGBA.stride = static_cast<int>(stride);
  config.output.u.RGBA.size = buf.size();
  VP8StatusCode st = WebPDecode(bytes.data(), bytes.size(), &config);
  WebPFreeDecBuffer(&config.output);
  if (st != VP8_STATUS_OK) throw_webp(st, "image data");
  sink.begin(w, h);
  for (int y = 0; y < h; ++y) {
    std::copy_n(buf.data() + stride * static_cast<size_t>(y), stride, sink.row_buffer(y));
    sink.row_done(y);
  }
}

}  // namespace mmrt::media::detail
