// Resizing as torchvision 0.14 resizes a uint8 frame tensor:
// `torchvision.transforms.functional.resize(frames, [h, w], BICUBIC, antialias=True)` (what
// qwen-vl-utils applies to the frames it reads from a video file). That call converts to float32,
// runs aten's separable antialiased interpolation (PIL-style support scaled by the reduction
// factor, Keys cubic with a = -0.5, weights normalised in float32, the horizontal pass first,
// the intermediate kept in float32), clamps to [0, 255] and rounds half to even. Unlike
// media::resize (PIL's 22-bit fixed point with a uint8 intermediate) this is float throughout.
// It reproduces torch 1.13's AVX2 / AVX-512 build (what torch runs on any x86-64 CPU with AVX2)
// operation for operation, fused multiply-adds included: every byte identical on all 321 cases
// measured (qwen-vl-utils' frame sizes, odd sizes, 1x1, extreme ratios; photos, noise, text),
// on every kernel variant; against torch's no-AVX build it differs by at most 1 in <= 0.004% of
// the bytes (docs/media.md). Vectorised (AVX-512 / AVX2 / portable, chosen at run time by
// ctx.isa) and split over rows on ctx.pool; the bytes do not depend on either.
#pragma once

#include "media/image.h"

namespace mmrt::media {

// Returns a new width x height image (a copy when the size is unchanged). InvalidArgument for
// a non-positive size.
Image resize_like_torchvision(const Image& src, int width, int height,
                              const MediaContext& ctx = {});

}  // namespace mmrt::media
