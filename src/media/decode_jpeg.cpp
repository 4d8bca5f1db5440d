// JPEG decoding with libjpeg-turbo's libjpeg API, set up the way PIL 9.4 decodes (JpegDecode.c):
// default (islow) DCT, fancy upsampling, libjpeg's own colour conversion to RGB, CMYK read raw and
// converted with PIL's Adobe-polarity formula. libjpeg reports errors by longjmp from inside its
// C frames: run_decoder() holds the setjmp and only trivially destructible locals, and the
// exception is thrown by its caller after the jump.
#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <jerror.h>
#include <jpeglib.h>

#include "core/error.h"
#include "media/decode_internal.h"

namespace mmrt::media::detail {
namespace {

constexpr int kRowBatch = kMaxRowsInFlight;  // rows handed to jpeg_read_scanlines per call

struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool hit_eof;  // libjpeg ran out of data and inserted a fake EOI
  bool starved;  // ... and then needed more entropy-coded bits than the data held
};

extern "C" void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (msg_level -1) are ignored as PIL ignores them, except running out of data.
extern "C" void on_emit_message(j_common_ptr cinfo, int msg_level) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  if (msg_level < 0) {
    if (cinfo->err->msg_code == JWRN_JPEG_EOF) err->hit_eof = true;
    if (cinfo->err->msg_code == JWRN_HIT_MARKER && err->hit_eof) err->starved = true;
    cinfo->err->num_warnings++;
  }
}

extern "C" void on_output_message(j_common_ptr) {}

// Everything libjpeg needs, heap-allocated so its address is stable across setjmp/longjmp.
struct JpegState {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  bool created = false;
  ~JpegState() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

enum class Stage { kHeader, kDecode };

const char* subsampling_name(const jpeg_decompress_struct& c) {
  if (c.num_components == 1) return "L";
  if (c.num_components == 4) return c.jpeg_color_space == JCS_YCCK ? "CMYK (YCCK)" : "CMYK";
  if (c.num_components != 3) return "unsupported";
  if (c.jpeg_color_space == JCS_RGB) return "RGB";
  int h = c.comp_info[0].h_samp_factor, v = c.comp_info[0].v_samp_factor;
  bool chroma_one = c.comp_info[1].h_samp_factor == 1 && c.comp_info[1].v_samp_factor == 1 &&
                    c.comp_info[2].h_samp_factor == 1 && c.comp_info[2].v_samp_factor == 1;
  if (!chroma_one) return "YCbCr";
  if (h == 1 && v == 1) return "YCbCr 4:4:4";
  if (h == 2 && v == 1) return "YCbCr 4:2:2";
  if (h == 2 && v == 2) return "YCbCr 4:2:0";
  if (h == 1 && v == 2) return "YCbCr 4:4:0";
  if (h == 4 && v == 1) return "YCbCr 4:1:1";
  return "YCbCr";
}

// PIL's "CMYK;I" unpack (255 - v) followed by cmyk2rgb: nk = 255 - K, out = nk - C * nk / 255
// with MULDIV255 rounding. On the raw (inverted) samples c, k this is k - muldiv(255 - c, k).
inline uint8_t cmyk_channel(uint8_t raw_c, uint8_t raw_k) {
  int c = 255 - raw_c, nk = raw_k;
  int t = c * nk + 128;
  return static_cast<uint8_t>(nk - (((t >> 8) + t) >> 8));
}

// Returns false after a libjpeg error (message in state.err.message). Only trivially
// destructible locals live here, so the longjmp skips no destructor. Sink exceptions propagate.
// Sets *truncated when the pixels needed data past the end: PIL (which suspends instead of
// padding) refuses such files but accepts one whose data ends after the last scanline.
bool run_decoder(JpegState& s, std::span<const uint8_t> bytes, Stage stage, int scale_denom,
                 RowSink* sink, Header* header, uint8_t* cmyk_rows, int cmyk_capacity,
                 bool* truncated) {
  jpeg_decompress_struct& c = s.cinfo;
  if (setjmp(s.err.jump)) return false;
  jpeg_create_decompress(&c);
  s.created = true;
  jpeg_mem_src(&c, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&c, TRUE);
  if (stage == Stage::kHeader) {
    header->info.format = ImageFormat::kJpeg;
    header->info.width = static_cast<int>(c.image_width);
    header->info.height = static_cast<int>(c.image_height);
    header->info.color = subsampling_name(c);
    header->interlaced = jpeg_has_multiple_scans(&c);
    return true;
  }
  const bool cmyk = c.num_components == 4;
  c.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  c.dct_method = JDCT_ISLOW;
  c.do_fancy_upsampling = TRUE;
  if (scale_denom > 1) {
    c.scale_num = 1;
    c.scale_denom = static_cast<unsigned>(scale_denom);
  }
  jpeg_start_decompress(&c);
  // A multi-scan file is read whole by jpeg_start_decompress; running out there is truncation.
  if (s.err.hit_eof) {
    *truncated = true;
    return true;
  }
  const int w = static_cast<int>(c.output_width), h = static_cast<int>(c.output_height);
  if (cmyk && w > cmyk_capacity) {  // the caller sized the buffer from the header
    std::snprintf(s.err.message, sizeof s.err.message, "CMYK output wider than its header");
    return false;
  }
  sink->begin(w, h);
  JSAMPROW rows[kRowBatch];
  while (c.output_scanline < c.output_height) {
    const int y0 = static_cast<int>(c.output_scanline);
    const int n = std::min(kRowBatch, h - y0);
    for (int i = 0; i < n; ++i)
      rows[i] = cmyk ? cmyk_rows + static_cast<size_t>(i) * 4 * w : sink->row_buffer(y0 + i);
    const int got = static_cast<int>(jpeg_read_scanlines(&c, rows, static_cast<JDIMENSION>(n)));
    if (got <= 0) break;
    for (int i = 0; i < got; ++i) {
      if (cmyk) {
        uint8_t* out = sink->row_buffer(y0 + i);
        const uint8_t* in = rows[i];
        for (int x = 0; x < w; ++x, in += 4, out += 3) {
          out[0] = cmyk_channel(in[0], in[3]);
          out[1] = cmyk_channel(in[1], in[3]);
          out[2] = cmyk_channel(in[2], in[3]);
        }
      }
      sink->row_done(y0 + i);
    }
  }
  if (s.err.starved || c.output_scanline < c.output_height) {
    *truncated = true;
    return true;
  }
  jpeg_finish_decompress(&c);
  return true;
}

void init_state(JpegState& s) {
  std::memset(&s.cinfo, 0, sizeof s.cinfo);
  std::memset(&s.err, 0, sizeof s.err);
  s.cinfo.err = jpeg_std_error(&s.err.pub);
  s.err.pub.error_exit = on_error_exit;
  s.err.pub.emit_message = on_emit_message;
  s.err.pub.output_message = on_output_message;
}

[[noreturn]] void throw_libjpeg(const JpegState& s) {
  std::string msg = s.err.message;
  if (s.err.hit_eof) throw FormatError("truncated JPEG: the data ends early (" + msg + ")");
  throw FormatError("corrupt JPEG: " + msg);
}

}  // namespace

Header jpeg_header(std::span<const uint8_t> bytes) {
  auto s = std::make_unique<JpegState>();
  init_state(*s);
  Header h;
  bool unused = false;
  if (!run_decoder(*s, bytes, Stage::kHeader, 1, nullptr, &h, nullptr, 0, &unused))
    throw_libjpeg(*s);
  if (s->cinfo.num_components != 1 && s->cinfo.num_components != 3 && s->cinfo.num_components != 4)
    throw Unimplemented("JPEG with " + std::to_string(s->cinfo.num_components) +
                        " components is not supported (PIL refuses it too)");
  return h;
}

void jpeg_decode(std::span<const uint8_t> bytes, int scale_denom, RowSink& sink) {
  auto s = std::make_unique<JpegState>();
  init_state(*s);
  // The CMYK staging rows are sized from the header width (scaled output is never wider).
  Header h = jpeg_header(bytes);
  std::vector<uint8_t> cmyk;
  int capacity = 0;
  if (h.info.color.substr(0, 4) == "CMYK") {
    capacity = h.info.width;
    cmyk.resize(static_cast<size_t>(capacity) * 4 * kRowBatch);
  }
  bool truncated = false;
  if (!run_decoder(*s, bytes, Stage::kDecode, scale_denom, &sink, nullptr, cmyk.data(), capacity,
                   &truncated))
    throw_libjpeg(*s);
  if (truncated)
    throw FormatError("truncated JPEG: the data (" + std::to_string(bytes.size()) +
                      " bytes) ends before the image is complete");
}

}  // namespace mmrt::media::detail
