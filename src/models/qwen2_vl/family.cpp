// Qwen2-VL behind the model seam: the loader (config, every tensor checked, the shared decoder
// and the vision tower), the Runner, inspect and make-tiny-model.
#include "models/qwen2_vl/family.h"

#include <cstring>
#include <filesystem>
#include <unordered_map>

#include "core/error.h"
#include "core/hash.h"
#include "io/json_fields.h"
#include "io/safetensors.h"
#include "kernels/layout.h"
#include "kernels/scratch.h"
#include "models/checkpoint.h"
#include "models/decoder/decoder.h"
#include "models/decoder/decoder_runner.h"
#include "models/decoder/model_spec.h"
#include "models/qwen2_vl/config.h"
#include "models/qwen2_vl/image_processor.h"
#include "models/qwen2_vl/processor.h"
#include "models/qwen2_vl/vision_tower.h"
#include "models/qwen2_vl/weights_spec.h"

namespace fs = std::filesystem;

namespace mmrt::models::qwen2_vl {

namespace {

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return "[" + s + "]";
}

// The config as every command reads it: parsed, then validated (one path for load and inspect).
Config read_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(path)) throw NotFound("model folder '" + dir + "' has no config.json");
  Config cfg = load_config(path);
  cfg.validate(path);
  return cfg;
}

// preprocessor_config.json (the class defaults when absent), checked against the vision tower:
// patches of another size or merge factor would give the tower features it cannot read.
ImageProcessorConfig read_processor_config(const std::string& dir, const Config& cfg) {
  const std::optional<CheckpointFile> f = read_preprocessor_config(dir);
  const ImageProcessorConfig pp =
      f ? ImageProcessorConfig::from_json(f->text, f->path) : ImageProcessorConfig{};
  const std::pair<const char*, std::pair<int64_t, int64_t>> pairs[] = {
      {"patch_size", {pp.patch_size, cfg.vision.patch_size}},
      {"merge_size", {pp.merge_size, cfg.vision.spatial_merge_size}},
      {"temporal_patch_size", {pp.temporal_patch_size, cfg.vision.temporal_patch_size}}};
  for (const auto& [key, v] : pairs)
    if (v.first != v.second)
      throw FormatError((f ? f->path : (fs::path(dir) / "preprocessor_config.json").string()) +
                        ": " + key + " " + std::to_string(v.first) +
                        " disagrees with config.json's vision_config (" + std::to_string(v.second) +
                        ")");
  return pp;
}

Hash128 config_key(const std::string& dir) {
  return hash128(io::read_text_file((fs::path(dir) / "config.json").string()));
}

class Qwen2VLRunner final : public DecoderRunner {
 public:
  Qwen2VLRunner(const kernels::Backend& be, io::SafeTensors st, std::unique_ptr<Decoder> lm,
                std::unique_ptr<VisionTower> vt, int64_t merge, bool reuse_slices)
      : DecoderRunner(be, std::move(st), std::move(lm)),
        vision_(std::move(vt)),
        merge_(merge),
        reuse_slices_(reuse_slices) {}

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
  double encode_flops(const PreparedMedia& item) const override {
    return vision_->flops(grid_of(item));
  }

 private:
  static GridThw grid_of(const PreparedMedia& item) {
    if ((item.modality != Modality::kImage && item.modality != Modality::kVideo) ||
        item.dims.size() != 3)
      throw InvalidArgument(
          "qwen2-vl: the encoder takes an image or a video with its (t, h, w) grid");
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
      throw InvalidArgument("qwen2-vl: the video's features have " +
                            std::to_string(item.features.dim(0)) + " rows, its grid needs " +
                            std::to_string(g[0] * rows));
    const int64_t per = rows / (merge_ * merge_);  // tokens per slice
    const std::span<const int32_t> kept = item.kept_tokens;
    std::vector<char> wanted(static_cast<size_t>(g[0]), kept.empty() ? 1 : 0);
    for (int32_t q : kept) {
      if (q < 0 || q >= g[0] * per)
        throw InvalidArgument("qwen2-vl: kept token " + std::to_string(q) + " is outside the " +
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
    if (enc.empty()) throw InvalidArgument("qwen2-vl: a video item keeps no token");
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
  std::unique_ptr<VisionTower> vision_;
  int64_t merge_;  // spatial_merge_size: a token is merge x merge patches
  bool reuse_slices_;
};

Model load(const kernels::Backend& be, const std::string& dir, const LoadOptions& opts) {
  const Config cfg = read_config(dir);
  io::SafeTensors st = io::SafeTensors::open(dir);
  const Layout layout = check_checkpoint(st, cfg);  // every tensor, before any compute
  DecoderConfig dc = decoder_config(cfg, layout.naming);
  dc.tied_embeddings = layout.tied;
  auto lm = Decoder::load(be, st, dc, opts);
  const EncoderPrecision prec =
      encoder_precision(be, opts, lm->weight_format());
  auto vt = VisionTower::load(be, st, cfg, prec);

  const ImageProcessorConfig pp = read_processor_config(dir, cfg);

  Model m;
  m.spec = decoder_model_spec(*lm, dir,
                              {.family = family().name,
                               .architecture = cfg.architecture,
                               .eos_token_id = cfg.text.eos_token_id,
                               .context_length = cfg.text.max_position_embeddings,
                               .modalities = {Modality::kImage, Modality::kVideo},
                               .config_key = config_key(dir)});
  m.spec.encoder_precision = prec.describe(cfg.vision.depth);
  m.spec.encoder_blocks = cfg.vision.depth;
  const ModelSpec& s = m.spec;
  m.processor = make_processor(cfg, pp, s.config_key, s.position_rows);
  m.runner = std::make_unique<Qwen2VLRunner>(be, std::move(st), std::move(lm), std::move(vt),
                                             cfg.vision.spatial_merge_size, opts.video_slice_reuse);
  return m;
}

std::unique_ptr<Processor> load_processor(const std::string& dir) {
  const Config cfg = read_config(dir);
  const ImageProcessorConfig pp = read_processor_config(dir, cfg);
  return make_processor(cfg, pp, config_key(dir),
                        decoder_config(cfg, Naming::kOld).position_rows());
}

Inspection inspect(const std::string& dir) {
  const Config cfg = read_config(dir);
  const io::SafeTensors st = io::SafeTensors::open(dir);
  const Layout layout = check_checkpoint(st, cfg);
  const ImageProcessorConfig pp = read_processor_config(dir, cfg);
  const TextConfig& t = cfg.text;
  const VisionConfig& v = cfg.vision;
  auto n = [](int64_t x) { return std::to_string(x); };
  char num[64];
  std::snprintf(num, sizeof num, "rope_theta %g, rms_norm_eps %g", t.rope_theta, t.rms_norm_eps);
  Inspection r;
  r.vocab_size = t.vocab_size;
  r.lines = {
      {"architecture", cfg.architecture + " (model_type " + cfg.model_type + ", torch_dtype " +
                           cfg.torch_dtype + ")"},
      {"text", "hidden " + n(t.hidden_size) + ", layers " + n(t.num_hidden_layers) + ", heads " +
                   n(t.num_attention_heads) + " (head_dim " + n(t.head_dim()) + "), kv heads " +
                   n(t.num_key_value_heads) + ", intermediate " + n(t.intermediate_size) +
                   ", vocab " + n(t.vocab_size) + ", mrope " + join(t.mrope_section) + ", " + num},
      {"context", n(t.max_position_embeddings) + " positions"},
      {"vision", "depth " + n(v.depth) + ", embed " + n(v.embed_dim) + ", heads " + n(v.num_heads) +
                     " (head_dim " + n(v.head_dim()) + "), mlp " + n(v.mlp_hidden()) + ", patch " +
                     n(v.patch_size) + ", temporal " + n(v.temporal_patch_size) + ", merge " +
                     n(v.spatial_merge_size) + ", out " + n(v.hidden_size)},
      {"tokens", "bos " + n(cfg.text.bos_token_id) + ", eos " + n(cfg.text.eos_token_id) +
                     ", vision_start " + n(cfg.vision_start_token_id) + ", vision_end " +
                     n(cfg.vision_end_token_id) + ", image " + n(cfg.image_token_id) + ", video " +
                     n(cfg.video_token_id)},
      {"naming", layout.naming == Naming::kOld ? "old (model.*, visual.*)"
                                               : "new (model.language_model.*, model.visual.*)"},
      {"lm_head", layout.tied ? "tied to embed_tokens" : "separate (untied)"},
      {"images", n(pp.min_pixels) + ".." + n(pp.max_pixels) + " pixels after resize"},
  };
  return r;
}

}  // namespace

const ModelFamily& family() {
  static const ModelFamily f{
      .name = "qwen2-vl",
      .architectures = {"Qwen2VLForConditionalGeneration"},
      .model_types = {"qwen2_vl"},
      .tiny_sizes = {"tiny", "small", "2b-shape"},
      .load = &load,
      .ops = ops_of({kDecoderOps, kVisionTowerOps}),
      .inspect = &inspect,
      .load_processor = &load_processor,
  };
  return f;
}

}  // namespace mmrt::models::qwen2_vl
