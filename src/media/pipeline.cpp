#include "media/pipeline.h"

#include <memory>

#include "core/clock.h"
#include "core/error.h"
#include "media/decode_internal.h"
#include "media/resize_impl.h"

namespace mmrt::media {

namespace {

// Streams decoder rows into the resizer, created once the decoded size is known.
class PipelineSink final : public detail::RowSink {
 public:
  PipelineSink(int out_w, int out_h, ResizeFilter f, const MediaContext& ctx)
      : out_w_(out_w), out_h_(out_h), filter_(f), ctx_(ctx) {}
  void begin(int width, int height) override {
    resizer =
        std::make_unique<detail::StreamingResizer>(width, height, out_w_, out_h_, filter_, ctx_);
    decoded_w = width;
    decoded_h = height;
  }
  uint8_t* row_buffer(int y) override { return resizer->row_buffer(y); }
  void row_done(int y) override { resizer->push_row(y); }

  std::unique_ptr<detail::StreamingResizer> resizer;
  int decoded_w = 0, decoded_h = 0;

 private:
  int out_w_, out_h_;
  ResizeFilter filter_;
  const MediaContext& ctx_;
};

}  // namespace

DecodedResized decode_resized(std::span<const uint8_t> bytes,
                              const std::function<Size2(int, int)>& target, ResizeFilter filter,
                              const DecodeOptions& opts, const MediaContext& ctx) {
  Stopwatch sw;
  DecodeOptions dopt = opts;
  dopt.buffers = ctx.buffers;
  const detail::Header h = detail::checked_header(bytes, dopt);
  const Size2 out = target(h.info.width, h.info.height);
  if (out.width <= 0 || out.height <= 0)
    throw InvalidArgument("decode_resized: target size " + std::to_string(out.width) + "x" +
                          std::to_string(out.height) + " is not positive");
  dopt.target_width = out.width;
  dopt.target_height = out.height;
  PipelineSink sink(out.width, out.height, filter, ctx);
  detail::decode_into(bytes, h, dopt, sink);
  if (!sink.resizer) throw InternalError("decode_resized: the decoder produced no image");
  DecodedResized r;
  r.source = h.info;
  r.decoded_width = sink.decoded_w;
  r.decoded_height = sink.decoded_h;
  if (dopt.mode == PreprocessMode::kFast && h.info.format == ImageFormat::kJpeg)
    r.jpeg_scale_denom = jpeg_scale_denominator(h.info.width, h.info.height, out.width, out.height);
  r.decode_ms = sw.millis();
  sw.reset();
  r.image = sink.resizer->finish();
  r.resize_ms = sw.millis();
  return r;
}

}  // namespace mmrt::media
