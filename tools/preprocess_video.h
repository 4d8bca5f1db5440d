// `mmrt preprocess --video` and the video sampling options other commands share.
#pragma once

#include <string>

#include "cli.h"
#include "models/model.h"
#include "models/qwen2_vl/image_processor.h"
#include "models/qwen2_vl/video_processor.h"

namespace mmrt::cli {

// --video-fps, --video-nframes, --video-min-frames, --video-max-frames, --video-min-pixels,
// --video-max-pixels, --video-total-pixels, --video-frame-rounding round|floor.
models::qwen2_vl::VideoSamplingConfig video_sampling_options(Args& args);

// A request's video settings (models::MediaOptions, 0: the model's): --video-prune-threshold and
// the sampling flags above but --video-frame-rounding, which is the model's alone.
models::MediaOptions video_request_options(Args& args);

// The rest of `mmrt preprocess` for --video FILE with the checkpoint's image processor config.
int run_preprocess_video(Args& args, const models::qwen2_vl::ImageProcessorConfig& pp,
                         const std::string& video);

}  // namespace mmrt::cli
