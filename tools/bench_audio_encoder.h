// `mmrt bench-model`'s audio section: on synthetic clips, the processor's preprocessing (decode,
// resample, log-mel) and the encoder (`Runner::encode`) with its GFLOP/s and tokens, and the
// encoder time of the longest clip over the shortest's.
#pragma once

#include <string>
#include <vector>

#include "kernels/backend.h"
#include "media/host_context.h"
#include "models/model.h"

namespace mmrt::cli {

// --audio-seconds: a comma-separated list of clip lengths in seconds, each in (0, 3600]; "0"
// alone: none (the section is skipped). InvalidArgument else.
std::vector<double> parse_audio_seconds(const std::string& value);

// Runs the section on `model` (which must take audio) and prints it on stdout, progress on stderr.
void bench_audio_encoder(const kernels::Backend& be, const media::HostContext& host,
                         models::Model& model, const std::vector<double>& seconds);

}  // namespace mmrt::cli
