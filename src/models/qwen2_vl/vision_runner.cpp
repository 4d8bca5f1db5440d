#include "models/qwen2_vl/vision_runner.h"

#include <algorithm>
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

// Which 2-frame slices of a video (or of a pruned item) go through the tower: the wanted ones
// (every slice, or those holding a kept token), each encoded on its own (attention, window and
// rotary positions are all per slice); a slice whose pixel rows are bit-identical to an earlier
// wanted slice's reuses that slice's output (the exact temporal tier, `reuse`).
struct SlicePlan {
  int64_t rows = 0, dim = 0, per = 0;  // patch rows and their width, tokens per slice
  std::vector<int64_t> wanted;         // slice indices, in order
  std::vector<int64_t> source;         // [slices]: the wanted slice whose output it has, or -1
};

// Which of `t` slices of `per` tokens hold a kept token (every slice when none is kept); empty,
// with the first kept token outside the video in `bad`, when one is.
std::vector<char> wanted_slices(std::span<const int32_t> kept, int64_t t, int64_t per,
                                int64_t& bad) {
  std::vector<char> wanted(static_cast<size_t>(t), kept.empty() ? 1 : 0);
  for (int32_t q : kept) {
    if (q < 0 || per <= 0 || q >= t * per) {
      bad = q;
      return {};
    }
    wanted[static_cast<size_t>(q / per)] = 1;
  }
  return wanted;
}

SlicePlan plan_slices(const PreparedMedia& item, const GridThw& g, int64_t merge, bool reuse,
                      const std::string& family) {
  SlicePlan p;
  p.rows = g[1] * g[2];
  p.dim = item.features.dim(1);
  if (item.features.rank() != 2 || item.features.dim(0) != g[0] * p.rows)
    throw InvalidArgument(family + ": the video's features have " +
                          std::to_string(item.features.dim(0)) + " rows, its grid needs " +
                          std::to_string(g[0] * p.rows));
  p.per = p.rows / (merge * merge);
  int64_t bad = 0;
  const std::vector<char> wanted = wanted_slices(item.kept_tokens, g[0], p.per, bad);
  if (wanted.empty())
    throw InvalidArgument(family + ": kept token " + std::to_string(bad) + " is outside the " +
                          std::to_string(g[0] * p.per) + " tokens of the video");
  const float* px = item.features.data<float>();
  const size_t slice_bytes = static_cast<size_t>(p.rows * p.dim) * sizeof(float);
  p.source.assign(static_cast<size_t>(g[0]), -1);
  std::unordered_map<Hash128, int64_t, Hash128Hasher> seen;  // content -> first wanted slice
  for (int64_t s = 0; s < g[0]; ++s) {
    if (!wanted[static_cast<size_t>(s)]) continue;
    p.wanted.push_back(s);
    p.source[static_cast<size_t>(s)] = s;
    if (!reuse) continue;
    const float* row = px + s * p.rows * p.dim;
    auto [it, fresh] = seen.emplace(hash128(row, slice_bytes), s);
    if (!fresh && std::memcmp(px + it->second * p.rows * p.dim, row, slice_bytes) == 0)
      p.source[static_cast<size_t>(s)] = it->second;
  }
  if (p.wanted.empty()) throw InvalidArgument(family + ": a video item keeps no token");
  return p;
}

// A video's (or a pruned item's) encode as a job of the tower's parts for every wanted slice, in
// order: a reused slice's parts run nothing; a distinct slice's tower job is made when its first
// part runs and freed after its last. The result: every slice's rows, or the kept tokens' rows.
class SliceJob final : public EncodeJob {
 public:
  SliceJob(const kernels::Backend& be, GridEncoder& tower, const PreparedMedia& item,
           const GridThw& g, SlicePlan plan)
      : be_(be),
        tower_(tower),
        item_(item),
        g_(g),
        plan_(std::move(plan)),
        per_slice_(tower.parts()) {
    out_.resize(static_cast<size_t>(g[0]));
  }
  int64_t parts() const override { return static_cast<int64_t>(plan_.wanted.size()) * per_slice_; }
  int64_t done() const override { return done_; }
  void run(int64_t n) override {
    check_run(n);
    while (n > 0) {
      const int64_t s = plan_.wanted[static_cast<size_t>(done_ / per_slice_)];
      const int64_t in = done_ % per_slice_, k = std::min(n, per_slice_ - in);
      if (plan_.source[static_cast<size_t>(s)] == s) {
        if (in == 0) {
          const GridThw one{1, g_[1], g_[2]};
          const float* px = item_.features.data<float>() + s * plan_.rows * plan_.dim;
          job_ = tower_.begin(
              Tensor::view(const_cast<float*>(px), DType::kF32, {plan_.rows, plan_.dim}),
              {&one, 1});
        }
        job_->run(k);
        if (in + k == per_slice_) {
          out_[static_cast<size_t>(s)] = job_->result();
          job_.reset();
          if (out_[static_cast<size_t>(s)].dim(0) != plan_.per)
            throw InternalError("vision tower produced " +
                                std::to_string(out_[static_cast<size_t>(s)].dim(0)) +
                                " rows for a slice of " + std::to_string(plan_.per) + " tokens");
        }
      }
      done_ += k;
      n -= k;
    }
  }
  Tensor result() override {
    check_finished();
    const std::span<const int32_t> kept = item_.kept_tokens;
    const int64_t per = plan_.per;
    const int64_t hidden = out_[static_cast<size_t>(plan_.wanted[0])].dim(1);
    auto slice_rows = [&](int64_t s) {
      return out_[static_cast<size_t>(plan_.source[static_cast<size_t>(s)])].data<float>();
    };
    Tensor out = be_.empty(
        DType::kF32, {kept.empty() ? g_[0] * per : static_cast<int64_t>(kept.size()), hidden});
    float* o = out.data<float>();
    if (kept.empty())
      for (int64_t s = 0; s < g_[0]; ++s)
        kernels::copy2d(be_, o + s * per * hidden, hidden, slice_rows(s), hidden, per, hidden);
    else
      for (size_t i = 0; i < kept.size(); ++i)
        kernels::copy2d(be_, o + static_cast<int64_t>(i) * hidden, hidden,
                        slice_rows(kept[i] / per) + (kept[i] % per) * hidden, hidden, 1, hidden);
    out_.clear();
    return out;
  }

 private:
  const kernels::Backend& be_;
  GridEncoder& tower_;
  const PreparedMedia& item_;
  GridThw g_;
  SlicePlan plan_;
  int64_t per_slice_, done_ = 0;
  std::unique_ptr<EncodeJob> job_;  // the slice in progress
  std::vector<Tensor> out_;         // [slices]: the distinct wanted slices' outputs
};

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
    Tensor out = encode_job(item)->run_rest();  // [n_tokens, hidden]
    if (out.dim(0) != item.n_tokens)
      throw InternalError("vision tower produced " + std::to_string(out.dim(0)) +
                          " rows for an image of " + std::to_string(item.n_tokens) + " tokens");
    return out;
  }
  // The tower's parts (its blocks and its merger) for an image, and for every wanted slice of a
  // video or a pruned item; one part for an item the encoder refuses (encode() says why: the
  // scheduler asks when it adds the request, where nothing may throw).
  int64_t encode_parts(const PreparedMedia& item) const override {
    const bool grid = (item.modality == Modality::kImage || item.modality == Modality::kVideo) &&
                      item.dims.size() == 3 && item.dims[0] >= 1 && item.features.rank() == 2;
    if (!grid) return 1;
    const int64_t t = item.dims[0], per = item.dims[1] * item.dims[2] / (merge_ * merge_);
    int64_t bad = 0;
    const std::vector<char> wanted = wanted_slices(item.kept_tokens, t, per, bad);
    const auto n = static_cast<int64_t>(std::count(wanted.begin(), wanted.end(), 1));
    return std::max<int64_t>(1, n * vision_->parts());
  }
  // An image through the tower's job; a video or a pruned item slice by slice (SliceJob). Its
  // rows: checked by the executor.
  std::unique_ptr<EncodeJob> encode_job(const PreparedMedia& item) override {
    const GridThw g = grid_of(item);
    if (g[0] == 1 && item.kept_tokens.empty()) return vision_->begin(item.features, {&g, 1});
    return std::make_unique<SliceJob>(be_, *vision_, item, g,
                                      plan_slices(item, g, merge_, reuse_slices_, family_));
  }
  double encode_flops(const PreparedMedia& item) const override {
    return vision_->flops(grid_of(item));
  }

 private:
  GridThw grid_of(const PreparedMedia& item) const {
    if ((item.modality != Modality::kImage && item.modality != Modality::kVideo) ||
        item.dims.size() != 3)
      throw InvalidArgument(family_ +
                            ": the encoder takes an image or a video with its (t, h, w) grid");
    return {item.dims[0], item.dims[1], item.dims[2]};
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
