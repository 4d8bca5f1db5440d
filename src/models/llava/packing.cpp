#include "models/llava/packing.h"

#include <cstring>

#include "core/error.h"

namespace mmrt::models::llava {

Tensor pack_image_features(const Tensor& crops, const ImageLayout& L, const float* newline) {
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
  const size_t row_bytes = static_cast<size_t>(H) * sizeof(float);
  Tensor out = Tensor::empty(DType::kF32, {L.n_tokens, H});  // [n_tokens, hidden]
  const float* in = crops.data<float>();
  float* o = out.data<float>();
  std::memcpy(o, in, static_cast<size_t>(per) * row_bytes);
  o += per * H;
  for (int64_t r = L.top; r < L.top + L.rows; ++r) {
    const int64_t tile_r = r / side, y = r % side;
    for (int64_t c = L.left; c < L.left + L.cols; ++c, o += H) {
      const int64_t crop = 1 + tile_r * L.tile_cols + c / side;
      std::memcpy(o, in + (crop * per + y * side + c % side) * H, row_bytes);
    }
    if (L.newline) {
      std::memcpy(o, newline, row_bytes);
      o += H;
    }
  }
  if (o != out.data<float>() + L.n_tokens * H)
    throw InternalError("llava: packed rows disagree with the layout's token count");
  return out;
}

}  // namespace mmrt::models::llava
