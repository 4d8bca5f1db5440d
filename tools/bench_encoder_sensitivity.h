// bench-model --encoder-sensitivity: which encoder blocks tolerate int8. The model is loaded once
// with the encoder in 16 bits and once per block with that block alone in int8 (as
// --encoder-weights int8 runs it), then once as --encoder-weights int8 --encoder-keep-last N
// would; each reports the relative error of the encoder's output on one image and the KL of the
// first-token distribution of a prompt with it, against the 16-bit run.
#pragma once

#include <string>

#include "bench_lm.h"
#include "media/host_context.h"

namespace mmrt::cli {

void bench_encoder_sensitivity(const kernels::Backend& be, const media::HostContext& host,
                               const std::string& dir, const models::LoadOptions& base,
                               const engine::KvOptions& kvo, int image_side);

}  // namespace mmrt::cli
