// Resizing bit-exact with PIL's 8-bit Image.resize((w, h), BICUBIC / BILINEAR) with
// reducing_gap=None: antialiased when downscaling, 22-bit fixed-point coefficients computed the
// way Resample.c computes them, horizontal pass first into a uint8 intermediate, then vertical.
// Vectorised (AVX-512 / AVX2 / portable, chosen at run time) and split over rows on a pool.
#pragma once

#include <string_view>

#include "media/image.h"

namespace mmrt::media {

enum class ResizeFilter { kBilinear, kBicubic };
std::string_view filter_name(ResizeFilter f);  // "bilinear", "bicubic"

// Returns a new width x height image (a copy when the size is unchanged, as PIL does). Throws
// InvalidArgument for a non-positive size. ctx.pool (optional) splits the rows of large
// images; ctx.isa caps the kernel variant; the result's memory comes from ctx.buffers.
Image resize(const Image& src, int width, int height, ResizeFilter filter,
             const MediaContext& ctx = {});

// Which kernels resize() uses on this CPU at most `cap` (MediaContext::isa): "avx512", "avx2" or
// "scalar".
const char* resize_isa(Isa cap = Isa::kAvx512Bf16);

}  // namespace mmrt::media
