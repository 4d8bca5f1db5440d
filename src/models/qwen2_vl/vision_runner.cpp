#include "models/qwen2_vl/vision_runner.h"

#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "kernels/layout.h"
#include "models/decoder/decoder_runner.h"

namespace mmrt::models::qwen2_vl {

namespace {

class VisionRunner final : public DecoderRunner {
 public:
  VisionRunner(const kernels::Backend& be, io::SafeTensors st, std::unique_ptr<Decoder> lm,
               std::unique_ptr<GridEncoder> vt, int64_t merge, bool reuse_slices,
               const char* family)
      : DecoderRunner(be, std::move(st), std::move(lm)),
        vision_(std::move(vt)),
        merge_(merge),
        reuse_slices_(reuse_slices),
        family_(family) {}

  Tensor encode(const PreparedMedia& item) override {
    const GridThw g = grid_of(item);
    Tensor out = g[0] > 1 || !item.kept_tokens.empty()
                     ? encode_slices(item, g)
                     : vision_->forward(item.features, {&g, 1});  // [n_tokens, hidden]
    if (out.dim(0) != item.n_tokens)
      throw InternalError("vision tower produced " + std::to_string(out.dim(0)) +
                          " rows for an image of " + std::to_string(item.n_tokens) + " tokens");
    return out;
  }
  // An image runs in the tower's parts (its blocks); a video (its slices, each a forward) and a
  // pruned item whole.
  int64_t encode_parts(const PreparedMedia& item) const override {
    return whole_only(item) ? 1 : vision_->parts();
  }
  std::unique_ptr<EncodeJob> encode_job(const PreparedMedia& item) override {
    if (whole_only(item)) return Runner::encode_job(item);
    const GridThw g = grid_of(item);
    return vision_->begin(item.features, {&g, 1});  // its rows: checked by the executor
  }
  double encode_flops(const PreparedMedia& item) const override {
    return vision_->flops(grid_of(item));
  }

 private:
  // One part: a video of several slices (each a forward), a pruned item, and an item the
  // encoder refuses (encode() says why; the scheduler asks for the parts when it adds the
  // request, where nothing may throw).
  bool whole_only(const PreparedMedia& item) const {
    const bool grid = (item.modality == Modality::kImage || item.modality == Modality::kVideo) &&
                      item.dims.size() == 3;
    return !grid || item.dims[0] != 1 || !item.kept_tokens.empty();
  }
  GridThw grid_of(const PreparedMedia& item) const {
    if ((item.modality != Modality::kImage && item.modality != Modality::kVideo) ||
        item.dims.size() != 3)
      throw InvalidArgument(family_ +
                            ": the encoder takes an image or a video with its (t, h, w) grid");
    return {item.dims[0], item.dims[1], item.dims[2]};
  }
  // The exact temporal tier: every 2-frame slice is encoded on its own (attention, window and
  // rotary positions are all per slice), so a slice whose pixel rows are bit-identical to an
  // earlier slice's has that slice's output; only distinct slices go through the tower. With
  // token pruning (item.kept_tokens) the output has the kept tokens' rows only, and a slice
  // that keeps none is not encoded.
  Tensor encode_slices(const PreparedMedia& item, const GridThw& g) {
    const int64_t rows = g[1] * g[2], D = item.features.dim(1);
    if (item.features.dim(0) != g[0] * rows)
      throw InvalidArgument(family_ + ": the video's features have " +
                            std::to_string(item.features.dim(0)) + " rows, its grid needs " +
                            std::to_string(g[0] * rows));
    const int64_t per = rows / (merge_ * merge_);  // tokens per slice
    const std::span<const int32_t> kept = item.kept_tokens;
    std::vector<char> wanted(static_cast<size_t>(g[0]), kept.empty() ? 1 : 0);
    for (int32_t q : kept) {
      if (q < 0 || q >= g[0] * per)
        throw InvalidArgument(family_ + ": kept token " + std::to_string(q) + " is outside the " +
                              std::to_string(g[0] * per) + " tokens of the video");
      wanted[static_cast<size_t>(q / per)] = 1;
    }
    const float* px = item.features.data<float>();
    const size_t slice_bytes = static_cast<size_t>(rows * D) * sizeof(float);
    std::vector<int64_t> source(static_cast<size_t>(g[0]), -1);  // slice -> index among distinct
    std::vector<int64_t> distinct;
    std::unordered_map<Hash128, int64_t, Hash128Hasher> seen;
    for (int64_t s = 0; s < g[0]; ++s) {
      if (!wanted[static_cast<size_t>(s)]) continue;
      const float* p = px + s * rows * D;
      auto [it, fresh] =
          seen.emplace(hash128(p, slice_bytes), static_cast<int64_t>(distinct.size()));
      if (!fresh && reuse_slices_ &&
          std::memcmp(px + distinct[static_cast<size_t>(it->second)] * rows * D, p, slice_bytes) ==
              0) {
        source[static_cast<size_t>(s)] = it->second;
        continue;
      }
      source[static_cast<size_t>(s)] = static_cast<int64_t>(distinct.size());
      distinct.push_back(s);
    }
    const GridThw one{1, g[1], g[2]};
    std::vector<Tensor> enc;
    for (int64_t s : distinct)
      enc.push_back(vision_->forward(
          Tensor::view(const_cast<float*>(px + s * rows * D), DType::kF32, {rows, D}), {&one, 1}));
    if (enc.empty()) throw InvalidArgument(family_ + ": a video item keeps no token");
    if (enc[0].dim(0) != per)
      throw InternalError("vision tower produced " + std::to_string(enc[0].dim(0)) +
                          " rows for a slice of " + std::to_string(per) + " tokens");
    const int64_t hidden = enc[0].dim(1);
    auto slice_rows = [&](int64_t s) {
      return enc[static_cast<size_t>(source[static_cast<size_t>(s)])].data<float>();
    };
    Tensor out = be_.empty(DType::kF32,
                           {kept.empty() ? g[0] * per : static_cast<int64_t>(kept.size()), hidden});
    float* o = out.data<float>();
    if (kept.empty())
      for (int64_t s = 0; s < g[0]; ++s)
        kernels::copy2d(be_, o + s * per * hidden, hidden, slice_rows(s), hidden, per, hidden);
    else
      for (size_t i = 0; i < kept.size(); ++i)
        kernels::copy2d(be_, o + static_cast<int64_t>(i) * hidden, hidden,
                        slice_rows(kept[i] / per) + (kept[i] % per) * hidden, hidden, 1, hidden);
    return out;
  }
  std::unique_ptr<GridEncoder> vision_;
  int64_t merge_;  // spatial_merge_size: a token is merge x merge patches
  bool reuse_slices_;
  std::string family_;
};

}  // namespace

std::unique_ptr<Runner> make_vision_runner(const kernels::Backend& be, io::SafeTensors st,
                                           std::unique_ptr<Decoder> lm,
                                           std::unique_ptr<GridEncoder> tower, int64_t merge,
                                           bool reuse_slices, const char* family) {
  return std::make_unique<VisionRunner>(be, std::move(st), std::move(lm), std::move(tower), merge,
                                        reuse_slices, family);
}

}  // namespace mmrt::models::qwen2_vl
