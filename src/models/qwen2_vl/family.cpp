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
#include "models/qwen2_vl/vision_runner.h"
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

Hash128 config_key(const std::string& dir) {
  return hash128(io::read_text_file((fs::path(dir) / "config.json").string()));
}

Model load(const kernels::Backend& be, const std::string& dir, const LoadOptions& opts) {
  const Config cfg = read_config(dir);
  io::SafeTensors st = io::SafeTensors::open(dir);
  const Layout layout = check_checkpoint(st, cfg);  // every tensor, before any compute
  DecoderConfig dc = decoder_config(cfg, layout.naming);
  dc.tied_embeddings = layout.tied;
  auto lm = Decoder::load(be, st, dc, opts);
  const EncoderPrecision prec = encoder_precision(be, opts, lm->weight_format());
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
  m.runner = make_vision_runner(be, std::move(st), std::move(lm), std::move(vt),
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
