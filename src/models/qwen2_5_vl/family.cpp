// Qwen2.5-VL behind the model seam: the loader (config, every tensor checked, the shared decoder
// and its own vision tower), inspect and the processor (Qwen2-VL's, with time-scaled video
// positions).
#include "models/qwen2_5_vl/family.h"

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/hash.h"
#include "io/json_fields.h"
#include "io/safetensors.h"
#include "models/decoder/decoder.h"
#include "models/decoder/model_spec.h"
#include "models/qwen2_5_vl/config.h"
#include "models/qwen2_5_vl/vision_tower.h"
#include "models/qwen2_5_vl/weights_spec.h"
#include "models/qwen2_vl/processor.h"
#include "models/qwen2_vl/vision_runner.h"
#include "models/qwen2_vl/weights_spec.h"

namespace fs = std::filesystem;

namespace mmrt::models::qwen2_5_vl {

namespace {

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

std::unique_ptr<Processor> processor_of(const Config& cfg, const std::string& dir,
                                        const Hash128& key, int32_t rows) {
  const qwen2_vl::ImageProcessorConfig pp = qwen2_vl::read_processor_config(dir, cfg.qwen2);
  return qwen2_vl::make_processor(cfg.qwen2, pp, key, rows, {}, cfg.vision.tokens_per_second);
}

Model load(const kernels::Backend& be, const std::string& dir, const LoadOptions& opts) {
  const Config cfg = read_config(dir);
  io::SafeTensors st = io::SafeTensors::open(dir);
  const qwen2_vl::Layout layout = check_checkpoint(st, cfg);  // every tensor, before any compute
  DecoderConfig dc = qwen2_vl::decoder_config(cfg.qwen2, layout.naming);
  dc.tied_embeddings = layout.tied;
  auto lm = Decoder::load(be, st, dc, opts);
  const EncoderPrecision prec = encoder_precision(be, opts, lm->weight_format());
  auto vt = VisionTower::load(be, st, cfg, prec);

  Model m;
  const qwen2_vl::TextConfig& t = cfg.qwen2.text;
  m.spec = decoder_model_spec(*lm, dir,
                              {.family = family().name,
                               .architecture = cfg.qwen2.architecture,
                               .eos_token_id = t.eos_token_id,
                               .context_length = t.max_position_embeddings,
                               .modalities = {Modality::kImage, Modality::kVideo},
                               .config_key = config_key(dir)});
  m.spec.encoder_precision = prec.describe(cfg.vision.depth);
  m.spec.encoder_blocks = cfg.vision.depth;
  m.processor = processor_of(cfg, dir, m.spec.config_key, m.spec.position_rows);
  m.runner = qwen2_vl::make_vision_runner(be, std::move(st), std::move(lm), std::move(vt),
                                          cfg.vision.spatial_merge_size, opts.video_slice_reuse,
                                          "qwen2.5-vl");
  return m;
}

std::unique_ptr<Processor> load_processor(const std::string& dir) {
  const Config cfg = read_config(dir);
  return processor_of(cfg, dir, config_key(dir),
                      qwen2_vl::decoder_config(cfg.qwen2, qwen2_vl::Naming::kOld).position_rows());
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return "[" + s + "]";
}

Inspection inspect(const std::string& dir) {
  const Config cfg = read_config(dir);
  const io::SafeTensors st = io::SafeTensors::open(dir);
  const qwen2_vl::Layout layout = check_checkpoint(st, cfg);
  const qwen2_vl::ImageProcessorConfig pp = qwen2_vl::read_processor_config(dir, cfg.qwen2);
  const qwen2_vl::TextConfig& t = cfg.qwen2.text;
  const VisionConfig& v = cfg.vision;
  auto n = [](int64_t x) { return std::to_string(x); };
  char num[64];
  std::snprintf(num, sizeof num, "rope_theta %g, rms_norm_eps %g", t.rope_theta, t.rms_norm_eps);
  Inspection r;
  r.vocab_size = t.vocab_size;
  r.lines = {
      {"architecture", cfg.qwen2.architecture + " (model_type " + cfg.qwen2.model_type +
                           ", torch_dtype " + cfg.qwen2.torch_dtype + ")"},
      {"text", "hidden " + n(t.hidden_size) + ", layers " + n(t.num_hidden_layers) + ", heads " +
                   n(t.num_attention_heads) + " (head_dim " + n(t.head_dim()) + "), kv heads " +
                   n(t.num_key_value_heads) + ", intermediate " + n(t.intermediate_size) +
                   ", vocab " + n(t.vocab_size) + ", mrope " + join(t.mrope_section) + ", " + num},
      {"context", n(t.max_position_embeddings) + " positions"},
      {"vision", "depth " + n(v.depth) + ", width " + n(v.hidden_size) + ", heads " +
                     n(v.num_heads) + " (head_dim " + n(v.head_dim()) + "), gated mlp " +
                     n(v.intermediate_size) + ", patch " + n(v.patch_size) + ", temporal " +
                     n(v.temporal_patch_size) + ", merge " + n(v.spatial_merge_size) + ", out " +
                     n(v.out_hidden_size)},
      {"attention", "windows of " + n(v.window_size) + " px (" + n(v.window_tokens()) + "x" +
                        n(v.window_tokens()) + " tokens), full in blocks " +
                        join(v.fullatt_block_indexes)},
      {"video", n(v.tokens_per_second) + " temporal positions per second"},
      {"tokens", "bos " + n(t.bos_token_id) + ", eos " + n(t.eos_token_id) + ", vision_start " +
                     n(cfg.qwen2.vision_start_token_id) + ", vision_end " +
                     n(cfg.qwen2.vision_end_token_id) + ", image " + n(cfg.qwen2.image_token_id) +
                     ", video " + n(cfg.qwen2.video_token_id)},
      {"naming", layout.naming == qwen2_vl::Naming::kOld
                     ? "old (model.*, visual.*)"
                     : "new (model.language_model.*, model.visual.*)"},
      {"lm_head", layout.tied ? "tied to embed_tokens" : "separate (untied)"},
      {"images", n(pp.min_pixels) + ".." + n(pp.max_pixels) + " pixels after resize"},
  };
  return r;
}

}  // namespace

const ModelFamily& family() {
  static const ModelFamily f{
      .name = "qwen2.5-vl",
      .architectures = {kArchitecture},
      .model_types = {kModelType},
      .tiny_sizes = {"tiny", "small", "3b-shape-4l"},
      .load = &load,
      .ops = ops_of({kDecoderOps, kVisionTowerOps}),
      .inspect = &inspect,
      .load_processor = &load_processor,
  };
  return f;
}

}  // namespace mmrt::models::qwen2_5_vl
