#include "engine/encoder_calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/clock.h"
#include "media/audio.h"

namespace mmrt::engine {
namespace {

constexpr int kImageSide = 336;
constexpr double kAudioSeconds = 5.0;

std::vector<uint8_t> synthetic_image() {
  std::vector<uint8_t> px(static_cast<size_t>(kImageSide) * kImageSide * 3);
  for (int y = 0; y < kImageSide; ++y)
    for (int x = 0; x < kImageSide; ++x) {
      uint8_t* p = &px[(static_cast<size_t>(y) * kImageSide + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / kImageSide);
      p[1] = static_cast<uint8_t>(y * 255 / kImageSide);
      p[2] = static_cast<uint8_t>((x + y) * 127 / kImageSide);
    }
  return media::encode_png_rgb8(px, kImageSide, kImageSide);
}

std::vector<uint8_t> synthetic_audio() {
  const int32_t rate = 16000;
  std::vector<int16_t> pcm(static_cast<size_t>(kAudioSeconds * rate));
  for (size_t i = 0; i < pcm.size(); ++i)
    pcm[i] =
        static_cast<int16_t>(8000 * std::sin(2 * M_PI * 220.0 * static_cast<double>(i) / rate));
  return media::encode_wav_pcm16(pcm, rate);
}

}  // namespace

EncoderCalibration calibrate_encoder(const kernels::Backend& be, const models::Model& model,
                                     const media::MediaContext& ctx) {
  EncoderCalibration c;
  try {
    std::vector<uint8_t> bytes;
    if (model.spec.takes(models::Modality::kImage)) {
      c.modality = models::Modality::kImage;
      bytes = synthetic_image();
    } else if (model.spec.takes(models::Modality::kAudio)) {
      c.modality = models::Modality::kAudio;
      bytes = synthetic_audio();
    } else {
      return c;
    }
    const models::PreparedMedia item = model.processor->preprocess(c.modality, bytes, ctx, {});
    if (item.encoder_cost <= 0) return c;
    auto timed = [&] {
      Stopwatch sw;
      (void)model.runner->encode(item);
      be.synchronize();
      return sw.seconds();
    };
    c.seconds = timed();
    c.seconds = std::min(c.seconds, timed());
    c.units = item.encoder_cost;
    c.ns_per_unit = c.seconds * 1e9 / static_cast<double>(c.units);
  } catch (const std::exception& e) {
    c = EncoderCalibration{};
    c.error = e.what();
  }
  return c;
}

std::string encoder_calibration_text(const EncoderCalibration& c) {
  if (!c.error.empty())
    return "encoder not measured at load (" + c.error +
           "): media is priced at the cost model's prior until image steps have run";
  if (c.units <= 0) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "encoder measured at load: %.3f ms per unit (image patch, audio frame) over %lld "
                "units",
                c.ns_per_unit * 1e-6, static_cast<long long>(c.units));
  return buf;
}

EncoderPricing::EncoderPricing(const kernels::Backend& be, const models::Model& model,
                               const media::MediaContext& ctx, Options o)
    : be_(be), model_(model), ctx_(ctx), o_(o) {}

EncoderCalibration EncoderPricing::at_load(CostModel& cost, int64_t now) {
  if (o_.given_ns_per_unit > 0) {
    cost.set_encoder_cost(o_.given_ns_per_unit);
    return {};
  }
  if (!o_.measure) return {};
  const EncoderCalibration k = measure();
  cost.set_encoder_cost(k.ns_per_unit);  // 0 (none): ignored
  last_ns_ = now;
  measured_ = true;
  return k;
}

bool EncoderPricing::note_refusal(const Request& r) {
  if (!o_.measure || o_.remeasure_every_ns <= 0 || r.retry_after_ns >= 0 || r.media.empty())
    return false;
  suspect_ = true;
  return true;
}

bool EncoderPricing::due(int64_t now) const {
  return suspect_ && (!measured_ || now - last_ns_ >= o_.remeasure_every_ns);
}

EncoderCalibration EncoderPricing::measure() const {
  return calibrate_encoder(be_, model_, ctx_);
}

bool EncoderPricing::apply(const EncoderCalibration& k, CostModel& cost, int64_t now) {
  last_ns_ = now;
  measured_ = true;
  suspect_ = false;
  const double before = cost.coefficients_ns()[3];
  if (k.units <= 0 || !(k.ns_per_unit < before)) return false;
  cost.set_encoder_cost(k.ns_per_unit);
  std::fprintf(stderr,
               "[mmrt] encoder measured again while idle: %.3f ms per unit (the price was %.3f "
               "ms: media refused as unattainable)\n",
               k.ns_per_unit * 1e-6, before * 1e-6);
  return true;
}

}  // namespace mmrt::engine
