#include "models/fuyu/processor.h"

#include <optional>
#include <string>

#include "core/error.h"
#include "core/hash.h"
#include "io/tokenizer.h"
#include "media/image.h"

namespace mmrt::models::fuyu {

TokenIds prompt_token_ids(const io::Tokenizer& tok, const std::string& origin) {
  const auto piece = [&](const char* p) {
    const std::optional<int32_t> id = tok.piece_to_id(p);
    if (!id) throw FormatError(origin + ": has no \"" + p + "\" token, which Fuyu's prompt needs");
    return *id;
  };
  TokenIds ids;
  ids.speaker = piece("|SPEAKER|");
  ids.newline = piece("|NEWLINE|");
  ids.bos = piece("<s>");
  piece("<0x04>");
  return ids;
}

ImageGeometry item_geometry(const PreparedMedia& item, int64_t patch_dim) {
  if (item.modality != Modality::kImage || item.dims.size() != 2 || item.dims[0] < 1 ||
      item.dims[1] < 1)
    throw InvalidArgument("fuyu: an image item needs its patch grid (rows, cols)");
  ImageGeometry g;
  g.rows = item.dims[0];
  g.cols = item.dims[1];
  if (g.n_tokens() != item.n_tokens)
    throw InvalidArgument("fuyu: a " + std::to_string(g.rows) + "x" + std::to_string(g.cols) +
                          " patch grid gives " + std::to_string(g.n_tokens()) + " tokens, not " +
                          std::to_string(item.n_tokens));
  const Tensor& f = item.features;
  if (!f.defined() || f.rank() == 0) return g;  // an estimate: no features yet
  if (f.dtype() != DType::kF32 || f.rank() != 2 || f.dim(0) != g.n_patches() ||
      f.dim(1) != patch_dim)
    throw InvalidArgument("fuyu: an image of " + std::to_string(g.n_patches()) +
                          " patches has features " + f.describe() + ", expected f32 [" +
                          std::to_string(g.n_patches()) + ", " + std::to_string(patch_dim) + "]");
  return g;
}

namespace {

class FuyuProcessor final : public Processor {
 public:
  FuyuProcessor(const Config& cfg, const ImageProcessorConfig& pp, const TokenIds& ids,
                const Hash128& key)
      : cfg_(cfg), pp_(pp), ids_(ids) {
    Hasher h;
    h.update(key)
        .update_pod(pp.target_height)
        .update_pod(pp.target_width)
        .update_pod(pp.patch_height)
        .update_pod(pp.patch_width)
        .update_pod(pp.padding_value)
        .update(&pp.image_mean, sizeof pp.image_mean)
        .update(&pp.image_std, sizeof pp.image_std)
        .update_pod(pp.rescale_factor)
        .update_pod(pp.do_resize)
        .update_pod(pp.do_pad)
        .update_pod(pp.do_rescale)
        .update_pod(pp.do_normalize)
        .update_pod(pp.resample)
        .update(std::string_view("fuyu patches"));
    settings_ = h.digest();
  }

  // FuyuProcessor has no chat template: its text (one message a line, images taken out), after
  // one |SPEAKER| per image and BOS, then the beginning-of-answer marker "<0x04>" (the sample text
  // the HF processor builds before it expands each |SPEAKER| into the image's grid).
  std::string render_chat(const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) const override {
    const Prompt q = split(messages);
    std::string s;
    for (size_t i = 0; i < q.images; ++i) s += "|SPEAKER|";
    return s + "<s>" + q.text + (add_generation_prompt ? "<0x04>" : "");
  }

  // As the HF processor tokenises it: the placeholders and BOS as ids, then the text with the
  // "<0x04>" marker encoded as one text (the tokenizer's normaliser prepends "▁" to it alone).
  std::vector<int32_t> chat_ids(const io::Tokenizer& tok, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const override {
    const Prompt q = split(messages);
    std::vector<int32_t> ids(q.images, ids_.speaker);
    ids.push_back(ids_.bos);
    const std::vector<int32_t> t = tok.encode(q.text + (add_generation_prompt ? "<0x04>" : ""));
    ids.insert(ids.end(), t.begin(), t.end());
    return ids;
  }

  MediaEstimate estimate(Modality m, std::span<const uint8_t> bytes,
                         const MediaOptions&) const override {
    check_modality(m);
    const media::ImageInfo info = media::probe_image(bytes);
    const ImageGeometry g = image_geometry(info.height, info.width, pp_);
    MediaEstimate e;
    e.dims = {g.rows, g.cols};
    e.n_tokens = g.n_tokens();
    e.encoder_cost = g.n_patches();
    e.source_pixels = static_cast<int64_t>(info.width) * info.height;
    e.feature_bytes = g.n_patches() * cfg_.patch_dim() * 4;
    e.exact = true;
    return e;
  }

  PreparedMedia preprocess(Modality m, std::span<const uint8_t> bytes,
                           const media::MediaContext& ctx, const MediaOptions&) const override {
    check_modality(m);
    PreprocessOptions po;
    po.ctx = ctx;
    ImageInputs in = preprocess_image(bytes, pp_, po);
    PreparedMedia p;
    p.modality = m;
    p.features = std::move(in.patches);  // [rows * cols, patch_dim]
    p.dims = {in.geometry.rows, in.geometry.cols};
    p.n_tokens = in.geometry.n_tokens();
    p.encoder_cost = in.geometry.n_patches();
    p.decode_ns = static_cast<int64_t>(in.decode_ms * 1e6);
    item_geometry(p, cfg_.patch_dim());
    return p;
  }

  ExpandedPrompt expand(std::span<const int32_t> ids,
                        std::span<const PreparedMedia> media) const override {
    // Each grid row's |SPEAKER| run, then |NEWLINE|.
    return expand_placeholders_1d(ids, ids_.speaker, media, "|SPEAKER|", "images",
                                  [&](const PreparedMedia& p, std::vector<int32_t>& out) {
                                    const ImageGeometry g = item_geometry(p, cfg_.patch_dim());
                                    for (int64_t r = 0; r < g.rows; ++r) {
                                      out.insert(out.end(), static_cast<size_t>(g.cols),
                                                 ids_.speaker);
                                      out.push_back(ids_.newline);
                                    }
                                  });
  }

  Hash128 content_key(Modality m, std::span<const uint8_t> bytes,
                      const MediaOptions&) const override {
    return media_content_key(bytes, settings_, m);
  }

 private:
  struct Prompt {
    size_t images = 0;
    std::string text;  // one message a line
  };

  // The messages' image count and text.
  static Prompt split(const std::vector<ChatMessage>& messages) {
    Prompt q;
    for (size_t i = 0; i < messages.size(); ++i) {
      const ChatMessage& m = messages[i];
      if (i) q.text += "\n";
      for (const ContentPart& p : m.content) {
        if (p.kind == ContentPart::Kind::kText)
          q.text += p.text;
        else if (p.kind == ContentPart::Kind::kImage)
          ++q.images;
        else
          throw Unimplemented(
              "Fuyu takes images and text; chat message " + std::to_string(i) + " has " +
              (p.kind == ContentPart::Kind::kVideo ? "a video" : "an audio") + " part");
      }
    }
    return q;
  }

  static void check_modality(Modality m) {
    if (m != Modality::kImage)
      throw Unimplemented(std::string("Fuyu takes images; ") + modality_name(m) +
                          " input is not supported");
  }

  Config cfg_;
  ImageProcessorConfig pp_;
  TokenIds ids_;
  Hash128 settings_;
};

}  // namespace

std::unique_ptr<Processor> make_processor(const Config& cfg, const ImageProcessorConfig& pp,
                                          const TokenIds& ids, const Hash128& config_key) {
  return std::make_unique<FuyuProcessor>(cfg, pp, ids, config_key);
}

}  // namespace mmrt::models::fuyu
