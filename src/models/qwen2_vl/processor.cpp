#include "models/qwen2_vl/processor.h"

#include <algorithm>
#include <string>

#include "core/hash.h"
#include "media/image.h"
#include "models/qwen2_vl/chat_template.h"

#include "core/error.h"

namespace mmrt::models::qwen2_vl {

MultimodalPrompt expand_image_prompt(std::span<const int32_t> ids, std::span<const GridThw> grids,
                                     const Config& cfg) {
  const int64_t ms = cfg.vision.spatial_merge_size;
  const int32_t pad = static_cast<int32_t>(cfg.image_token_id);
  MultimodalPrompt p;
  size_t img = 0;
  for (int32_t t : ids) {
    if (t != pad) {
      p.ids.push_back(t);
      continue;
    }
    if (img >= grids.size())
      throw InvalidArgument("prompt has more image placeholders than images (" +
                            std::to_string(grids.size()) + " given)");
    const GridThw& g = grids[img++];
    int64_t n = g[0] * (g[1] / ms) * (g[2] / ms);
    p.images.push_back({static_cast<int64_t>(p.ids.size()), n});
    p.ids.insert(p.ids.end(), static_cast<size_t>(n), pad);
  }
  if (img != grids.size())
    throw InvalidArgument("prompt has " + std::to_string(img) + " image placeholders but " +
                          std::to_string(grids.size()) + " images were given");
  rope_index(p.ids, grids, cfg, p.positions, p.rope_delta);
  return p;
}

void rope_index(std::span<const int32_t> ids, std::span<const GridThw> grids, const Config& cfg,
                std::vector<int32_t>& positions, int32_t& rope_delta) {
  const int64_t S = static_cast<int64_t>(ids.size());
  const int64_t ms = cfg.vision.spatial_merge_size;
  const int32_t pad = static_cast<int32_t>(cfg.image_token_id);
  positions.assign(static_cast<size_t>(3 * S), 0);
  auto set = [&](int64_t i, int64_t t, int64_t h, int64_t w) {
    positions[static_cast<size_t>(i)] = static_cast<int32_t>(t);
    positions[static_cast<size_t>(S + i)] = static_cast<int32_t>(h);
    positions[static_cast<size_t>(2 * S + i)] = static_cast<int32_t>(w);
  };
  int64_t next = 0;  // max position so far + 1
  size_t img = 0;
  int64_t i = 0;
  while (i < S) {
    if (ids[static_cast<size_t>(i)] != pad) {
      set(i, next, next, next);
      ++next;
      ++i;
      continue;
    }
    if (img >= grids.size())
      throw InvalidArgument("image pad tokens at position " + std::to_string(i) +
                            " have no image grid");
    const GridThw& g = grids[img++];
    const int64_t gt = g[0], gh = g[1] / ms, gw = g[2] / ms, n = gt * gh * gw;
    if (i + n > S)
      throw InvalidArgument("image " + std::to_string(img - 1) + " needs " + std::to_string(n) +
                            " pad tokens, the prompt ends after " + std::to_string(S - i));
    int64_t mx = 0;
    for (int64_t t = 0; t < gt; ++t)
      for (int64_t h = 0; h < gh; ++h)
        for (int64_t w = 0; w < gw; ++w) {
          set(i++, next + t, next + h, next + w);
          mx = std::max({mx, t, h, w});
        }
    next += mx + 1;
  }
  rope_delta = static_cast<int32_t>(next - S);
}

GridThw image_grid(int64_t height, int64_t width, const ImageProcessorConfig& pp) {
  const ResizedSize rs =
      pp.do_resize ? smart_resize(height, width, pp.factor(), pp.min_pixels, pp.max_pixels)
                   : ResizedSize{height, width};
  return {1, rs.height / pp.patch_size, rs.width / pp.patch_size};
}

namespace {

class Qwen2VLProcessor final : public Processor {
 public:
  Qwen2VLProcessor(const Config& cfg, const ImageProcessorConfig& pp, const Hash128& config_key,
                   int32_t rows)
      : cfg_(cfg), pp_(pp), rows_(rows) {
    // The settings every media key depends on: the model's config and the preprocessing.
    Hasher h;
    h.update(config_key)
        .update_pod(pp.min_pixels)
        .update_pod(pp.max_pixels)
        .update_pod(pp.patch_size)
        .update_pod(pp.temporal_patch_size)
        .update_pod(pp.merge_size)
        .update(&pp.image_mean, sizeof pp.image_mean)
        .update(&pp.image_std, sizeof pp.image_std)
        .update_pod(pp.rescale_factor)
        .update_pod(pp.do_resize)
        .update_pod(pp.do_rescale)
        .update_pod(pp.do_normalize)
        .update_pod(pp.resample)
        .update(std::string_view("qwen2-vl fast"));
    settings_ = h.digest();
  }

  std::string render_chat(const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) const override {
    ChatTemplateOptions o;
    o.add_generation_prompt = add_generation_prompt;
    return qwen2_vl::render_chat(messages, o);
  }

  MediaEstimate estimate(Modality m, std::span<const uint8_t> bytes) const override {
    check_modality(m);
    const media::ImageInfo info = media::probe_image(bytes);
    const GridThw g = image_grid(info.height, info.width, pp_);
    const int64_t ms = pp_.merge_size, patches = g[0] * g[1] * g[2];
    const int64_t row = 3 * pp_.temporal_patch_size * pp_.patch_size * pp_.patch_size;
    return {{g[0], g[1], g[2]},
            g[0] * (g[1] / ms) * (g[2] / ms),
            patches,
            static_cast<int64_t>(info.width) * info.height,
            patches * row * static_cast<int64_t>(sizeof(float)),
            true};
  }

  PreparedMedia preprocess(Modality m, std::span<const uint8_t> bytes,
                           const media::MediaContext& ctx) const override {
    check_modality(m);
    PreprocessOptions o;
    o.mode = PreprocessMode::kFast;
    o.ctx = ctx;
    ImageInputs in = preprocess_image(bytes, pp_, o);
    PreparedMedia p;
    p.modality = m;
    p.features = std::move(in.pixel_values);
    p.dims = {in.grid_t, in.grid_h, in.grid_w};
    p.n_tokens = in.n_tokens();
    p.encoder_cost = in.grid_t * in.grid_h * in.grid_w;
    p.decode_ns = static_cast<int64_t>(in.decode_ms * 1e6);
    return p;
  }

  ExpandedPrompt expand(std::span<const int32_t> ids,
                        std::span<const PreparedMedia> media) const override {
    std::vector<GridThw> grids;
    for (const PreparedMedia& p : media) {
      check_modality(p.modality);
      if (p.dims.size() != 3)
        throw InvalidArgument("qwen2-vl: a prepared image must carry its (t, h, w) grid");
      grids.push_back({p.dims[0], p.dims[1], p.dims[2]});
    }
    MultimodalPrompt mp = expand_image_prompt(ids, grids, cfg_);
    ExpandedPrompt e;
    e.ids = std::move(mp.ids);
    e.rope_delta = mp.rope_delta;
    // Plain RoPE (no mrope_section) reads the temporal row only.
    e.positions = std::move(mp.positions);
    if (rows_ == 1) e.positions.resize(e.ids.size());
    for (const ImageSpan& s : mp.images) e.spans.push_back({s.begin, s.n_tokens});
    return e;
  }

  Hash128 content_key(Modality m, std::span<const uint8_t> bytes) const override {
    Hasher h;
    h.update(hash128(bytes.data(), bytes.size())).update(settings_).update_pod(m);
    return h.digest();
  }

 private:
  static void check_modality(Modality m) {
    if (m != Modality::kImage)
      throw Unimplemented(std::string("Qwen2-VL in mmrt takes images; ") + modality_name(m) +
                          " input is not supported yet");
  }
  Config cfg_;
  ImageProcessorConfig pp_;
  int32_t rows_;
  Hash128 settings_;
};

}  // namespace

std::unique_ptr<Processor> make_processor(const Config& cfg, const ImageProcessorConfig& pp,
                                          const Hash128& config_key, int32_t position_rows) {
  return std::make_unique<Qwen2VLProcessor>(cfg, pp, config_key, position_rows);
}

}  // namespace mmrt::models::qwen2_vl
