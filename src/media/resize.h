// Resizing bit-exact with PIL's 8-bit Image.resize((w, h), BICUBIC / BILINEAR) with
// reducing_gap=None: antialiased when downscaling, 22-bit fixed-point coefficients computed the
// way Resample.c computes them, horizontal pass first into a uint8 intermediate, then vertical.
// Vectorised (AVX-512 / AVX2 / portable, chosen at run time) and split over rows on a pool.
#pragma once

#include <string_view>

#include "media/image.h"

namespace mmrt {
class ThreadPool;
}

namespace mmrt::media {

enum class ResizeFilter { kBilinear, kBicubic };
std::string_view filter_name(ResizeFilter f);  // "bilinear", "bicubic"

// Returns a new width x height image (a copy when the size is unchanged, as PIL does). Throws
// InvalidArgument for a non-positive size. `pool` (optional) splits the rows of large images.
Image resize(const Image& src, int width, int height, ResizeFilter filter,
             ThreadPool* pool = nullptr);

// Which kernels resize() uses on this CPU: "avx512", "avx2" or "scalar".
const char* resize_isa();
// Test hook: force a variant; returns false (and changes nothing) if this CPU lacks it.
bool resize_force_isa(const char* isa);

}  // namespace mmrt::media
