#include "models/qwen2_vl/processor.h"

#include <algorithm>
#include <string>

#include "core/hash.h"
#include "media/image.h"
#include "models/qwen2_vl/chat_template.h"
#include "models/qwen2_vl/token_pruning.h"

#include "core/error.h"

namespace mmrt::models::qwen2_vl {

namespace {

std::vector<MediaGrid> image_items(std::span<const GridThw> grids) {
  std::vector<MediaGrid> items;
  for (const GridThw& g : grids) items.push_back({Modality::kImage, g});
  return items;
}

// Tokens of an item in the prompt (all of its grid's, or those kept), after checking `kept`.
int64_t item_tokens(const MediaGrid& item, int64_t ms, size_t k) {
  const GridThw& g = item.grid;
  const int64_t full = g[0] * (g[1] / ms) * (g[2] / ms);
  if (item.kept.empty()) return full;
  int64_t prev = -1;
  for (int32_t q : item.kept) {
    if (q <= prev || q >= full)
      throw InvalidArgument("media item " + std::to_string(k) + ": kept token " +
                            std::to_string(q) + " is not increasing within its " +
                            std::to_string(full) + " tokens");
    prev = q;
  }
  return static_cast<int64_t>(item.kept.size());
}

}  // namespace

MultimodalPrompt expand_media_prompt(std::span<const int32_t> ids, std::span<const MediaGrid> items,
                                     const Config& cfg) {
  const int64_t ms = cfg.vision.spatial_merge_size;
  const int32_t image_pad = static_cast<int32_t>(cfg.image_token_id);
  const int32_t video_pad = static_cast<int32_t>(cfg.video_token_id);
  MultimodalPrompt p;
  size_t k = 0;
  for (int32_t t : ids) {
    if (t != image_pad && t != video_pad) {
      p.ids.push_back(t);
      continue;
    }
    const char* kind = t == image_pad ? "image" : "video";
    if (k >= items.size())
      throw InvalidArgument(std::string("prompt has more media placeholders than media items (") +
                            std::to_string(items.size()) + " given) at a " + kind + " pad");
    const MediaGrid& item = items[k++];
    const Modality want = t == image_pad ? Modality::kImage : Modality::kVideo;
    if (item.modality != want)
      throw InvalidArgument("media placeholder " + std::to_string(k - 1) + " is " +
                            (t == image_pad ? "an image" : "a video") + " pad but item " +
                            std::to_string(k - 1) + " is " + modality_name(item.modality));
    const int64_t n = item_tokens(item, ms, k - 1);
    p.items.push_back({static_cast<int64_t>(p.ids.size()), n});
    p.ids.insert(p.ids.end(), static_cast<size_t>(n), t);
  }
  if (k != items.size())
    throw InvalidArgument("prompt has " + std::to_string(k) + " media placeholders but " +
                          std::to_string(items.size()) + " media items were given");
  rope_index(p.ids, items, cfg, p.positions, p.rope_delta);
  return p;
}

MultimodalPrompt expand_image_prompt(std::span<const int32_t> ids, std::span<const GridThw> grids,
                                     const Config& cfg) {
  const std::vector<MediaGrid> items = image_items(grids);
  return expand_media_prompt(ids, items, cfg);
}

void rope_index(std::span<const int32_t> ids, std::span<const GridThw> grids, const Config& cfg,
                std::vector<int32_t>& positions, int32_t& rope_delta) {
  const std::vector<MediaGrid> items = image_items(grids);
  rope_index(ids, items, cfg, positions, rope_delta);
}

void rope_index(std::span<const int32_t> ids, std::span<const MediaGrid> items, const Config& cfg,
                std::vector<int32_t>& positions, int32_t& rope_delta) {
  const int64_t S = static_cast<int64_t>(ids.size());
  const int64_t ms = cfg.vision.spatial_merge_size;
  const int32_t image_pad = static_cast<int32_t>(cfg.image_token_id);
  const int32_t video_pad = static_cast<int32_t>(cfg.video_token_id);
  positions.assign(static_cast<size_t>(3 * S), 0);
  auto set = [&](int64_t i, int64_t t, int64_t h, int64_t w) {
    positions[static_cast<size_t>(i)] = static_cast<int32_t>(t);
    positions[static_cast<size_t>(S + i)] = static_cast<int32_t>(h);
    positions[static_cast<size_t>(2 * S + i)] = static_cast<int32_t>(w);
  };
  int64_t next = 0;  // max position so far + 1
  size_t k = 0;
  int64_t i = 0;
  // The video item last placed: where its run ended, the position its grid started at and the
  // slices it (and the items continuing it) spans. A video run right after it continues it.
  int64_t prev_end = -1, prev_base = 0, prev_slices = 0;
  while (i < S) {
    const int32_t tok = ids[static_cast<size_t>(i)];
    if (tok != image_pad && tok != video_pad) {
      set(i, next, next, next);
      ++next;
      ++i;
      continue;
    }
    if (k >= items.size())
      throw InvalidArgument("media pad tokens at position " + std::to_string(i) +
                            " have no media grid");
    const MediaGrid& item = items[k++];
    const GridThw& g = item.grid;
    const int64_t gt = g[0], gh = g[1] / ms, gw = g[2] / ms;
    const int64_t n = item_tokens(item, ms, k - 1);
    if (i + n > S)
      throw InvalidArgument("media item " + std::to_string(k - 1) + " needs " + std::to_string(n) +
                            " pad tokens, the prompt ends after " + std::to_string(S - i));
    // Qwen2-VL: the raw slice index; Qwen2.5-VL: seconds * tokens_per_second (MediaGrid).
    auto tpos = [&](int64_t t) {
      const float s = static_cast<float>(t) * item.second_per_grid;
      return static_cast<int64_t>(s * static_cast<float>(item.tokens_per_second));
    };
    // A continuing video (its pads right after the previous video's, as render_chat writes a
    // ContentPart::continues): its slices follow that video's, one grid in time.
    const bool continues = item.modality == Modality::kVideo && i == prev_end;
    int64_t base = next, t0 = 0;
    if (continues) {
      const MediaGrid& prev = items[k - 2];
      if (prev.grid[1] != g[1] || prev.grid[2] != g[2] ||
          prev.second_per_grid != item.second_per_grid ||
          prev.tokens_per_second != item.tokens_per_second)
        throw InvalidArgument("video item " + std::to_string(k - 1) + " continues item " +
                              std::to_string(k - 2) + " but its frames are " +
                              std::to_string(g[1] * cfg.vision.patch_size) + "x" +
                              std::to_string(g[2] * cfg.vision.patch_size) + " px, not " +
                              std::to_string(prev.grid[1] * cfg.vision.patch_size) + "x" +
                              std::to_string(prev.grid[2] * cfg.vision.patch_size) +
                              " (or another temporal interval): continuing segments need the "
                              "same frame size");
      base = prev_base;
      t0 = prev_slices;
    }
    for (int64_t q = 0; q < n; ++q) {
      const TokenPos tp =
          token_pos(item.kept.empty() ? q : item.kept[static_cast<size_t>(q)], gh, gw);
      set(i++, base + tpos(t0 + tp.t), base + tp.h, base + tp.w);
    }
    // The text after it is placed as if no token were pruned: the whole grid's extent.
    next = base + std::max({tpos(t0 + gt - 1), gh - 1, gw - 1}) + 1;
    if (item.modality == Modality::kVideo) {
      prev_end = i;
      prev_base = base;
      prev_slices = t0 + gt;
    } else {
      prev_end = -1;
    }
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
                   int32_t rows, const VideoSamplingConfig& video, int64_t tokens_per_second)
      : cfg_(cfg), pp_(pp), video_(video), rows_(rows), tokens_per_second_(tokens_per_second) {
    video_.validate();
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
    hash_video_settings(h, video_);
    settings_ = h.digest();
  }

  std::string render_chat(const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) const override {
    ChatTemplateOptions o;
    o.add_generation_prompt = add_generation_prompt;
    return qwen2_vl::render_chat(messages, o);
  }

  MediaEstimate estimate(Modality m, std::span<const uint8_t> bytes,
                         const MediaOptions& opts) const override {
    check_modality(m);
    validate(opts);
    const int64_t ms = pp_.merge_size;
    const int64_t row = 3 * pp_.temporal_patch_size * pp_.patch_size * pp_.patch_size;
    if (m == Modality::kVideo) {
      // The frame count comes from the container's packets, so the layout is final: exact.
      const VideoPlan plan = plan_video(media::probe_video(bytes), pp_, sampling(opts));
      const GridThw& g = plan.grid;
      const int64_t patches = g[0] * g[1] * g[2];
      MediaEstimate e{{g[0], g[1], g[2]},
                      plan.n_tokens(ms),
                      patches,
                      plan.info.frames * plan.info.width * plan.info.height,
                      patches * row * static_cast<int64_t>(sizeof(float)),
                      // Pruning keeps what the pixels decide: the counts are upper bounds.
                      !prunes(m, opts)};
      e.slice_seconds = slice_seconds(plan.sample_fps);
      return e;
    }
    const media::ImageInfo info = media::probe_image(bytes);
    const GridThw g = image_grid(info.height, info.width, pp_);
    const int64_t patches = g[0] * g[1] * g[2];
    return {{g[0], g[1], g[2]},
            g[0] * (g[1] / ms) * (g[2] / ms),
            patches,
            static_cast<int64_t>(info.width) * info.height,
            patches * row * static_cast<int64_t>(sizeof(float)),
            true};
  }

  PreparedMedia preprocess(Modality m, std::span<const uint8_t> bytes,
                           const media::MediaContext& ctx,
                           const MediaOptions& opts) const override {
    check_modality(m);
    validate(opts);
    PreparedMedia p;
    p.modality = m;
    if (m == Modality::kVideo) {
      VideoPreprocessOptions o;
      o.ctx = ctx;
      VideoInputs in = preprocess_video(bytes, pp_, sampling(opts), o);
      p.features = std::move(in.pixel_values_videos);
      p.dims = {in.grid[0], in.grid[1], in.grid[2]};
      p.n_tokens = in.n_tokens();
      p.encoder_cost = in.grid[0] * in.grid[1] * in.grid[2];
      p.decode_ns = static_cast<int64_t>(in.decode_ms * 1e6);
      p.slice_seconds = slice_seconds(in.sample_fps);
      if (prunes(m, opts)) prune(p, opts.video_prune_threshold);
      return p;
    }
    PreprocessOptions o;
    o.mode = PreprocessMode::kFast;
    o.ctx = ctx;
    ImageInputs in = preprocess_image(bytes, pp_, o);
    p.features = std::move(in.pixel_values);
    p.dims = {in.grid_t, in.grid_h, in.grid_w};
    p.n_tokens = in.n_tokens();
    p.encoder_cost = in.grid_t * in.grid_h * in.grid_w;
    p.decode_ns = static_cast<int64_t>(in.decode_ms * 1e6);
    return p;
  }

  ExpandedPrompt expand(std::span<const int32_t> ids,
                        std::span<const PreparedMedia> media) const override {
    std::vector<MediaGrid> items;
    for (const PreparedMedia& p : media) {
      check_modality(p.modality);
      if (p.dims.size() != 3)
        throw InvalidArgument(std::string("qwen2-vl: a prepared ") + modality_name(p.modality) +
                              " must carry its (t, h, w) grid");
      MediaGrid item{p.modality, {p.dims[0], p.dims[1], p.dims[2]}, 1.0f, 1, p.kept_tokens};
      if (tokens_per_second_ > 0 && p.modality == Modality::kVideo) {
        if (!(p.slice_seconds > 0))
          throw InvalidArgument(
              "qwen2.5-vl: a prepared video must carry the seconds a slice spans");
        item.second_per_grid = static_cast<float>(p.slice_seconds);
        item.tokens_per_second = tokens_per_second_;
      }
      items.push_back(item);
    }
    MultimodalPrompt mp = expand_media_prompt(ids, items, cfg_);
    ExpandedPrompt e;
    e.ids = std::move(mp.ids);
    e.rope_delta = mp.rope_delta;
    // Plain RoPE (no mrope_section) reads the temporal row only.
    e.positions = std::move(mp.positions);
    if (rows_ == 1) e.positions.resize(e.ids.size());
    for (const ItemSpan& s : mp.items) e.spans.push_back({s.begin, s.n_tokens});
    return e;
  }

  Hash128 content_key(Modality m, std::span<const uint8_t> bytes,
                      const MediaOptions& opts) const override {
    Hasher h;
    h.update(hash128(bytes.data(), bytes.size())).update(settings_).update_pod(m);
    if (prunes(m, opts)) h.update_pod(opts.video_prune_threshold);
    if (m == Modality::kVideo && opts.samples_video()) hash_video_settings(h, sampling(opts));
    return h.digest();
  }

 private:
  // The model's video sampling with the request's settings over it (checked).
  VideoSamplingConfig sampling(const MediaOptions& o) const {
    if (!o.samples_video()) return video_;
    VideoSamplingConfig v = video_;
    if (o.video_fps > 0) {
      v.fps = o.video_fps;
      v.nframes = 0;
    }
    if (o.video_nframes > 0) v.nframes = o.video_nframes;
    if (o.video_min_frames > 0) v.min_frames = o.video_min_frames;
    if (o.video_max_frames > 0) v.max_frames = o.video_max_frames;
    if (o.video_min_pixels > 0) v.min_pixels = o.video_min_pixels;
    if (o.video_max_pixels > 0) v.max_pixels = o.video_max_pixels;
    if (o.video_total_pixels > 0) v.total_pixels = o.video_total_pixels;
    // A request may lower the budgets the model was loaded with, never raise them: its work
    // stays within what the server was sized for (a pruned clip is preprocessed before its
    // prompt is checked against the context).
    static constexpr const char* kLower = ": a request may lower the video budgets, not raise them";
    const struct {
      const char* name;
      int64_t got, cap;
      const char* why;
    } caps[] = {{"video_nframes", v.nframes, video_.max_frames, kLower},
                {"video_max_frames", v.max_frames, video_.max_frames, kLower},
                {"video_min_pixels", v.min_pixels, video_.min_pixels, kLower},
                {"video_max_pixels", v.max_pixels, video_.max_pixels, kLower},
                {"video_total_pixels", v.total_pixels, video_.total_pixels, kLower}};
    for (const auto& c : caps)
      if (c.got > c.cap)
        throw InvalidArgument(std::string(c.name) + " " + std::to_string(c.got) +
                              " is above the server's " + std::to_string(c.cap) + c.why);
    if (v.min_frames > v.max_frames)  // either may be the request's or the server's
      throw InvalidArgument("video_min_frames " + std::to_string(v.min_frames) +
                            (o.video_min_frames > 0 ? "" : " (the server's)") +
                            " is above video_max_frames " + std::to_string(v.max_frames) +
                            (o.video_max_frames > 0 ? "" : " (the server's)"));
    v.validate();
    return v;
  }
  // HF's second_per_grid_t: temporal_patch_size / the fps the frames were sampled at.
  double slice_seconds(double sample_fps) const {
    return sample_fps > 0 ? static_cast<double>(pp_.temporal_patch_size) / sample_fps : 0;
  }
  static bool prunes(Modality m, const MediaOptions& opts) {
    return m == Modality::kVideo && opts.video_prune_threshold > 0;
  }
  // The approximate tier: the kept tokens, and the encoder work of the slices that keep any.
  void prune(PreparedMedia& p, double threshold) const {
    const GridThw g{p.dims[0], p.dims[1], p.dims[2]};
    std::vector<int32_t> kept = prune_video_tokens(p.features, g, pp_, threshold);
    const int64_t per_slice = g[1] * g[2] / (pp_.merge_size * pp_.merge_size);
    int64_t slices = 0, last = -1;
    for (int32_t q : kept)
      if (q / per_slice != last) {
        last = q / per_slice;
        ++slices;
      }
    p.encoder_cost = slices * g[1] * g[2];
    if (static_cast<int64_t>(kept.size()) == p.n_tokens) return;  // none dropped
    p.n_tokens = static_cast<int64_t>(kept.size());
    p.kept_tokens = std::move(kept);
  }
  static void check_modality(Modality m) {
    if (m != Modality::kImage && m != Modality::kVideo)
      throw Unimplemented(std::string("Qwen2-VL takes images and videos; ") + modality_name(m) +
                          " input is not supported");
  }
  Config cfg_;
  ImageProcessorConfig pp_;
  VideoSamplingConfig video_;
  int32_t rows_;
  int64_t tokens_per_second_;  // > 0: Qwen2.5-VL's time-scaled video positions
  Hash128 settings_;
};

}  // namespace

std::unique_ptr<Processor> make_processor(const Config& cfg, const ImageProcessorConfig& pp,
                                          const Hash128& config_key, int32_t position_rows,
                                          const VideoSamplingConfig& video,
                                          int64_t tokens_per_second) {
  return std::make_unique<Qwen2VLProcessor>(cfg, pp, config_key, position_rows, video,
                                            tokens_per_second);
}

}  // namespace mmrt::models::qwen2_vl
