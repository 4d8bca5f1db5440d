#include "models/llava/packing.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/layout.h"

namespace mmrt::models::llava {

Tensor pack_image_features(const kernels::Backend& be, const Tensor& crops, const ImageLayout& L,
                           const float* newline) {
  const int64_t per = L.base_tokens;
  if (crops.dtype() != DType::kF32 || crops.rank() != 2 || crops.dim(0) != L.n_crops * per)
    throw InvalidArgument("llava: the encoder gave " + crops.describe() + " for an image of " +
                          std::to_string(L.n_crops) + " crops of " + std::to_string(per) +
                          " tokens");
  if (L.newline && !newline) throw InvalidArgument("llava: the layout needs image_newline");
  if (L.n_crops == 1) return crops;
  const int64_t H = crops.dim(1), side = L.side;
  if (per != side * side)
    throw InvalidArgument("llava: anyres packing needs side² tokens per crop (no class token)");
  Tensor out = be.empty(DType::kF32, {L.n_tokens, H});  // [n_tokens, hidden]
  const float* in = crops.data<float>();
  float* o = out.data<float>();
  kernels::copy2d(be, o, H, in, H, per, H);
  o += per * H;
  for (int64_t r = L.top; r < L.top + L.rows; ++r) {
    const int64_t tile_r = r / side, y = r % side;
    // Columns [left, left + cols) of grid row r: one run of rows per crop they cross.
    for (int64_t c = L.left; c < L.left + L.cols;) {
      const int64_t crop = 1 + tile_r * L.tile_cols + c / side;
      const int64_t run = std::min(L.left + L.cols, (c / side + 1) * side) - c;
      kernels::copy2d(be, o, H, in + (crop * per + y * side + c % side) * H, H, run, H);
      o += run * H;
      c += run;
    }
    if (L.newline) {
      kernels::copy2d(be, o, H, newline, H, 1, H);
      o += H;
    }
  }
  if (o != out.data<float>() + L.n_tokens * H)
    throw InternalError("llava: packed rows disagree with the layout's token count");
  return out;
}

}  // namespace mmrt::models::llava
