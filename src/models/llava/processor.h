// LLaVA's request side: the chat template, image estimates from the header alone (anyres
// layout and token count), decoding + the image processor's crops, <image> expansion (plain 1-D
// positions) and content keys.
//
// A prepared image: features = pixel_values f32 [n_crops, 3, S, S] (the base image, then the
// anyres tiles), dims = {height, width} of the decoded image (HF image_sizes), n_tokens from
// image_layout(), encoder_cost = n_crops * (side² + 1) (the tower's rows).
#pragma once

#include <memory>

#include "models/llava/anyres.h"
#include "models/llava/chat_template.h"
#include "models/llava/config.h"
#include "models/llava/image_processor.h"
#include "models/model.h"

namespace mmrt::models::llava {

// The layout settings of a checkpoint (pinpoints, crop and patch size, class token, newline).
LayoutParams layout_params(const Config& cfg);
// The layout of a prepared item from its dims; InvalidArgument when dims or token count disagree.
ImageLayout item_layout(const PreparedMedia& item, const LayoutParams& p);

std::unique_ptr<Processor> make_processor(const Config& cfg, const ImageProcessorConfig& pp,
                                          const Hash128& config_key, ChatFormat format);

}  // namespace mmrt::models::llava
