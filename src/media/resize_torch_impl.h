// Internal pieces of resize_like_torchvision shared by resize_torch.cpp and its per-ISA kernel
// files. Not part of the public API.
//
// What is reproduced is aten 1.13's antialiased bicubic as its AVX2 / AVX-512 builds compute it
// (the build torch runs on any x86-64 CPU with AVX2; its no-AVX "default" build differs, see
// docs/media.md). GCC contracted parts of that code into fused multiply-adds, and vectorised the
// tap loop four taps at a time, so each output value is accumulated as
//   o = t[0] * w[0]
//   o = o + t[j] * w[j]        for 1 <= j < fused   (product rounded, then the sum)
//   o = fma(t[j], w[j], o)     for fused <= j < n   (one rounding)
// with fused = 1 + 4 * floor((n - 1) / 4) when n - 1 >= 4, else 1. Every kernel variant does
// exactly this in float32, so the variants agree bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/isa.h"

namespace mmrt::media::detail {

// One axis: output i reads inputs [first[i], first[i] + count[i]) with float weights
// w[i * taps + j] (zero past count[i]); taps j >= fused[i] are accumulated with fma.
struct TorchAxis {
  int in_size = 0, out_size = 0, taps = 0;
  std::vector<int32_t> first, count, fused;
  std::vector<float> w;
};
// aten's _compute_weights_aa for the cubic filter (a = -0.5, support 2 * max(scale, 1)), with
// scale = float(in) / out.
TorchAxis plan_torch_axis(int in_size, int out_size);
// n -> n as a single weight 1.0 per output: an exact pass-through (a skipped axis).
TorchAxis identity_torch_axis(int n);
// The index from which taps are fused for an output with n taps.
inline int torch_fused_from(int n) {
  return n - 1 >= 4 ? 1 + (n - 1) / 4 * 4 : 1;
}

// Kernels. Rows are packed RGB.
//   horizontal: `rows` (1 <= rows <= block_rows) source rows starting at `src`, `src_stride`
//     bytes apart (each readable 16 bytes past its last value), into float rows starting at `dst`,
//     `dst_stride` floats apart; writes exactly 3 * a.out_size floats per row. `scratch` holds
//     horizontal_scratch(a) floats.
//   vertical: one output row of `nvals` bytes from n float rows (each readable up to
//     nvals rounded up to 16 floats), weights w[0..n), fused from `fused`; rounds half to even
//     and clamps to [0, 255]. Writes exactly nvals bytes.
struct TorchResizeKernels {
  const char* name;
  int block_rows;
  size_t (*horizontal_scratch)(const TorchAxis& a);
  void (*horizontal)(const uint8_t* src, size_t src_stride, int rows, float* dst, size_t dst_stride,
                     const TorchAxis& a, float* scratch);
  void (*vertical)(const float* const* rows, const float* w, int n, int fused, uint8_t* dst,
                   int nvals);
};
const TorchResizeKernels& torch_resize_kernels(Isa cap);
const TorchResizeKernels& scalar_torch_resize_kernels();
const TorchResizeKernels& avx2_torch_resize_kernels();    // resize_torch_avx2.cpp
const TorchResizeKernels& avx512_torch_resize_kernels();  // resize_torch_avx512.cpp

}  // namespace mmrt::media::detail
