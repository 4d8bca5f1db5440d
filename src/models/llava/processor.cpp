#include "models/llava/processor.h"

#include <string>

#include "core/error.h"
#include "core/hash.h"
#include "media/image.h"

namespace mmrt::models::llava {

LayoutParams layout_params(const Config& cfg) {
  LayoutParams p;
  p.pinpoints = cfg.next ? cfg.image_grid_pinpoints : std::vector<Resolution>{};
  p.crop = cfg.vision.image_size;
  p.patch = cfg.vision.patch_size;
  p.keep_cls = cfg.vision_feature_select_strategy == "full";
  p.newline = cfg.next;
  return p;
}

ImageLayout item_layout(const PreparedMedia& item, const LayoutParams& p) {
  if (item.modality != Modality::kImage || item.dims.size() != 2)
    throw InvalidArgument("llava: the encoder takes an image with its (height, width)");
  const ImageLayout l = image_layout({item.dims[0], item.dims[1]}, p);
  if (l.n_tokens != item.n_tokens)
    throw InvalidArgument("llava: an image of " + std::to_string(item.dims[0]) + "x" +
                          std::to_string(item.dims[1]) + " gives " + std::to_string(l.n_tokens) +
                          " tokens, not the " + std::to_string(item.n_tokens) + " it claims");
  return l;
}

namespace {

class LlavaProcessor final : public Processor {
 public:
  LlavaProcessor(const Config& cfg, const ImageProcessorConfig& pp, const Hash128& key,
                 ChatFormat format)
      : cfg_(cfg), pp_(pp), layout_(layout_params(cfg)), format_(format) {
    Hasher h;
    h.update(key)
        .update_pod(pp.shortest_edge)
        .update_pod(pp.crop_height)
        .update_pod(pp.crop_width)
        .update(&pp.image_mean, sizeof pp.image_mean)
        .update(&pp.image_std, sizeof pp.image_std)
        .update_pod(pp.rescale_factor)
        .update_pod(pp.do_resize)
        .update_pod(pp.do_center_crop)
        .update_pod(pp.do_rescale)
        .update_pod(pp.do_normalize)
        .update_pod(pp.resample);
    for (const Resolution& r : pp.grid_pinpoints) h.update_pod(r.height).update_pod(r.width);
    h.update(std::string_view(cfg.next ? "llava-next anyres" : "llava clip"));
    settings_ = h.digest();
  }

  std::string render_chat(const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) const override {
    return llava::render_chat(format_, messages, add_generation_prompt);
  }

  // MediaOptions hold video settings only: images ignore them.
  MediaEstimate estimate(Modality m, std::span<const uint8_t> bytes,
                         const MediaOptions&) const override {
    check_modality(m);
    const media::ImageInfo info = media::probe_image(bytes);
    const ImageLayout l = image_layout({info.height, info.width}, layout_);
    MediaEstimate e;
    e.dims = {info.height, info.width};
    e.n_tokens = l.n_tokens;
    e.encoder_cost = cost(l);
    e.source_pixels = static_cast<int64_t>(info.width) * info.height;
    e.feature_bytes = l.n_crops * 3 * pp_.crop_height * pp_.crop_width * 4;
    e.exact = true;
    return e;
  }

  PreparedMedia preprocess(Modality m, std::span<const uint8_t> bytes,
                           const media::MediaContext& ctx, const MediaOptions&) const override {
    check_modality(m);
    PreprocessOptions po;
    po.ctx = ctx;
    ImageInputs in = preprocess_image(bytes, pp_, po);
    const ImageLayout l = image_layout(in.original, layout_);
    if (in.pixel_values.dim(0) != l.n_crops)
      throw InternalError("llava: the image processor made " +
                          std::to_string(in.pixel_values.dim(0)) + " crops, the layout " +
                          std::to_string(l.n_crops));
    PreparedMedia p;
    p.modality = m;
    p.features = std::move(in.pixel_values);  // [n_crops, 3, S, S]
    p.dims = {in.original.height, in.original.width};
    p.n_tokens = l.n_tokens;
    p.encoder_cost = cost(l);
    p.decode_ns = static_cast<int64_t>(in.decode_ms * 1e6);
    return p;
  }

  ExpandedPrompt expand(std::span<const int32_t> ids,
                        std::span<const PreparedMedia> media) const override {
    const int32_t image = static_cast<int32_t>(cfg_.image_token_index);
    return expand_placeholders_1d(ids, image, media, "<image>", "images",
                                  [&](const PreparedMedia& p, std::vector<int32_t>& out) {
                                    item_layout(p, layout_);  // checks the item
                                    out.insert(out.end(), static_cast<size_t>(p.n_tokens), image);
                                  });
  }

  Hash128 content_key(Modality m, std::span<const uint8_t> bytes,
                      const MediaOptions&) const override {
    return media_content_key(bytes, settings_, m);
  }

 private:
  static void check_modality(Modality m) {
    if (m != Modality::kImage)
      throw Unimplemented(std::string("LLaVA takes images; ") + modality_name(m) +
                          " input is not supported");
  }
  int64_t cost(const ImageLayout& l) const { return l.n_crops * (l.side * l.side + 1); }

  Config cfg_;
  ImageProcessorConfig pp_;
  LayoutParams layout_;
  ChatFormat format_;
  Hash128 settings_;
};

}  // namespace

std::unique_ptr<Processor> make_processor(const Config& cfg, const ImageProcessorConfig& pp,
                                          const Hash128& config_key, ChatFormat format) {
  return std::make_unique<LlavaProcessor>(cfg, pp, config_key, format);
}

}  // namespace mmrt::models::llava
