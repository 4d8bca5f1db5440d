// The encoder's cost, measured at load. Admission prices a request's media by the cost model's
// encoder term; a prior cannot know whether the model's encoder is a 32-wide test tower or
// CLIP ViT-L, and the online fit learns the term only once image steps have run. Without a
// measurement the first image requests of a fresh engine are admitted at the prior's price and
// refused late, after their encoder ran. One timed encode of a synthetic item at load gives the
// term from the start.
#pragma once

#include <cstdint>
#include <string>

#include "engine/cost_model.h"
#include "engine/request.h"
#include "kernels/backend.h"
#include "media/image.h"
#include "models/model.h"

namespace mmrt::engine {

struct EncoderCalibration {
  models::Modality modality = models::Modality::kImage;
  int64_t units = 0;       // the item's encoder_cost (vision patches, audio frames); 0: none
  double seconds = 0;      // one encode of it
  double ns_per_unit = 0;  // seconds / units
  std::string error;       // why it could not be measured (the model keeps the prior)
};

// Encodes one synthetic item of the first of image or audio the model takes (a 336 x 336 PNG,
// 5 s of 16 kHz WAV) through the model's own processor and runner, on the calling thread and the
// runner's compute threads, twice, the faster taken: the first pays one-time set-up (GEMM
// primitives, and the page faults of weights read from the mapped checkpoint: the 2b-shape
// tower's bf16 blocks measured 4.03 ms per patch cold against ~1.7 warm, which priced every
// image 2.4x too high). Never throws: units = 0 when the model takes neither, and a failure is
// described in `error`.
// `be`: the backend the model computes on (each timed run waits for its queued work: a GPU's ops
// return before they have run).
EncoderCalibration calibrate_encoder(const kernels::Backend& be, const models::Model& model,
                                     const media::MediaContext& ctx);

// "encoder measured at load: 1.234 ms per unit (image patch, audio frame) over 1728 units", or
// why it was not; "" when it was not tried.
std::string encoder_calibration_text(const EncoderCalibration& c);

// The encoder's price over an engine's life (EngineConfig::encoder_ns_per_unit,
// calibrate_encoder, encoder_remeasure_ns): given, or measured at load; and measured again when
// a request with media was refused as never servable here, since a measurement taken while the
// cores were busy elsewhere prices every image too high (5.2 and 9.1 ms per patch against 1.55
// quiet, seen on a shared 2-core machine) and, every such image refused, no image step runs to
// correct it. Load only ever slows an encode, so a lower measurement replaces a higher price and
// never the reverse. The engine calls it under its books' lock, measure() without.
class EncoderPricing {
 public:
  struct Options {
    double given_ns_per_unit = 0;    // > 0: this price, never measured at load
    bool measure = true;             // measure at load (when not given) and again when suspect
    int64_t remeasure_every_ns = 0;  // the least time between two measurements; <= 0: never again
  };
  EncoderPricing(const kernels::Backend& be, const models::Model& model,
                 const media::MediaContext& ctx, Options o);
  // Sets `cost`'s encoder price at load; the measurement (units 0: given, or none taken).
  EncoderCalibration at_load(CostModel& cost, int64_t now);
  // A refused request: when it has media and was refused as never servable here
  // (Request::retry_after_ns < 0), the price is suspect (true: wake the idle step loop).
  bool note_refusal(const Request& r);
  bool due(int64_t now) const;         // suspect, and a measurement allowed now
  EncoderCalibration measure() const;  // one measurement: slow (two encodes)
  // Lowers `cost`'s price to k's where k's is lower (logged); true when it did.
  bool apply(const EncoderCalibration& k, CostModel& cost, int64_t now);

 private:
  const kernels::Backend& be_;
  const models::Model& model_;
  const media::MediaContext ctx_;  // a copy: HostContext::media_context() returns one
  Options o_;
  int64_t last_ns_ = 0;
  bool measured_ = false, suspect_ = false;
};

}  // namespace mmrt::engine
