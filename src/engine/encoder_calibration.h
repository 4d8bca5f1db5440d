// The encoder's cost, measured at load. Admission prices a request's media by the cost model's
// encoder term; a prior cannot know whether the model's encoder is a 32-wide test tower or
// CLIP ViT-L, and the online fit learns the term only once image steps have run. Without a
// measurement the first image requests of a fresh engine are admitted at the prior's price and
// refused late, after their encoder ran. One timed encode of a synthetic item at load gives the
// term from the start.
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace mmrt::engine
