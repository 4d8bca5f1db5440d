// LLaVA behind the model seam: the loader (config, preprocessing settings, every tensor checked,
// the shared decoder and the CLIP tower), the Runner, inspect and make-tiny-model.
#include "models/llava/family.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "io/json_fields.h"
#include "io/safetensors.h"
#include "kernels/ops.h"
#include "kernels/scratch.h"
#include "models/checkpoint.h"
#include "models/decoder/decoder.h"
#include "models/decoder/decoder_runner.h"
#include "models/decoder/model_spec.h"
#include "models/llava/clip_tower.h"
#include "models/llava/packing.h"
#include "models/llava/processor.h"
#include "models/llava/weights_spec.h"

namespace fs = std::filesystem;

namespace mmrt::models::llava {

namespace {

// What every command reads before anything else: the validated config.json, the image
// processor's settings checked against the tower, the chat format, the config's hash.
struct Settings {
  Config cfg;
  ImageProcessorConfig pp;
  ChatFormat format = ChatFormat::kMistral;
  Hash128 config_key;
};

// The chat format of a checkpoint: its template's (tokenizer_config.json or chat_template.json)
// when it has one, else the text model's (Mistral: [INST], Llama/Vicuna: USER/ASSISTANT).
ChatFormat chat_format(const std::string& dir, const Config& cfg) {
  for (const char* name : {"chat_template.json", "tokenizer_config.json"}) {
    const fs::path p = fs::path(dir) / name;
    std::error_code ec;
    if (!fs::exists(p, ec)) continue;
    const nlohmann::json j = io::parse_json_object(io::read_text_file(p.string()), p.string());
    if (!j.contains("chat_template") || !j["chat_template"].is_string()) continue;
    const std::string t = j["chat_template"].get<std::string>();
    if (t.find("[INST]") != std::string::npos) return ChatFormat::kMistral;
    if (t.find("ASSISTANT:") != std::string::npos) return ChatFormat::kVicuna;
    throw Unimplemented(p.string() + ": the chat template is neither the [INST] (Mistral) nor " +
                        "the USER:/ASSISTANT: (Vicuna) one LLaVA checkpoints use");
  }
  return cfg.text.model_type == "mistral" ? ChatFormat::kMistral : ChatFormat::kVicuna;
}

Settings read_settings(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) throw NotFound("model folder '" + dir + "' has no config.json");
  const std::string text = io::read_text_file(path);
  Settings s;
  s.cfg = parse_config(text, path);
  s.cfg.validate(path);
  const std::optional<CheckpointFile> pp = read_preprocessor_config(dir);
  s.pp =
      pp ? ImageProcessorConfig::from_json(pp->text, pp->path, s.cfg.next) : ImageProcessorConfig{};
  if (s.cfg.next && !pp) s.pp.grid_pinpoints = s.cfg.image_grid_pinpoints;
  const std::string pp_path = pp ? pp->path : (fs::path(dir) / "preprocessor_config.json").string();
  const int64_t S = s.cfg.vision.image_size;
  if (s.pp.crop_height != S || s.pp.crop_width != S)
    throw FormatError(pp_path + ": crop_size " + std::to_string(s.pp.crop_height) + "x" +
                      std::to_string(s.pp.crop_width) + " disagrees with the vision tower's " +
                      "image_size " + std::to_string(S));
  if (s.cfg.next && s.pp.grid_pinpoints != s.cfg.image_grid_pinpoints)
    throw FormatError(pp_path + ": image_grid_pinpoints disagree with config.json's");
  s.format = chat_format(dir, s.cfg);
  s.config_key = hash128(text);
  return s;
}

class LlavaRunner final : public DecoderRunner {
 public:
  LlavaRunner(const kernels::Backend& be, io::SafeTensors st, std::unique_ptr<Decoder> lm,
              std::unique_ptr<ClipTower> tower, const Config& cfg, kernels::Buffer newline)
      : DecoderRunner(be, std::move(st), std::move(lm)),
        tower_(std::move(tower)),
        layout_(layout_params(cfg)),
        newline_(std::move(newline)) {}

  // The image's crops through CLIP and the projector, then packed as pack_image_features does.
  Tensor encode(const PreparedMedia& item) override { return encode_job(item)->run_rest(); }
  // A layer a part and one for the projector; one part for an item the encoder refuses (encode()
  // says why: the scheduler asks when it adds the request, where nothing may throw).
  int64_t encode_parts(const PreparedMedia& item) const override {
    try {
      const ImageLayout l = item_layout(item, layout_);
      const Tensor& f = item.features;
      return f.rank() == 4 && f.dim(0) == l.n_crops ? tower_->parts() : 1;
    } catch (const InvalidArgument&) {
      return 1;
    }
  }
  std::unique_ptr<EncodeJob> encode_job(const PreparedMedia& item) override {
    const ImageLayout l = item_layout(item, layout_);
    if (item.features.rank() != 4 || item.features.dim(0) != l.n_crops)
      throw InvalidArgument("llava: an image of " + std::to_string(l.n_crops) +
                            " crops has features " + item.features.describe());
    const float* newline = newline_.empty() ? nullptr : newline_.data();
    return map_result(tower_->begin(item.features), [this, l, newline](Tensor crops) {
      return pack_image_features(be_, crops, l, newline);
    });
  }
  double encode_flops(const PreparedMedia& item) const override {
    return tower_->flops(item_layout(item, layout_).n_crops);
  }

 private:
  std::unique_ptr<ClipTower> tower_;
  LayoutParams layout_;
  kernels::Buffer newline_;  // image_newline [hidden] f32 (LLaVA-NeXT), the backend's memory
};

int64_t context_length(const TextConfig& t) {
  // Sliding-window attention is not run: the context stops where the window would start to
  // matter, so every answer is the one the model computes.
  return t.sliding_window > 0 ? std::min(t.max_position_embeddings, t.sliding_window)
                              : t.max_position_embeddings;
}

Model load(const kernels::Backend& be, const std::string& dir, const LoadOptions& opts) {
  const Settings s = read_settings(dir);
  io::SafeTensors st = io::SafeTensors::open(dir);
  const Layout layout = check_checkpoint(st, s.cfg);  // every tensor, before any compute
  DecoderConfig dc = decoder_config(s.cfg, layout.naming);
  dc.tied_embeddings = layout.tied;
  auto lm = Decoder::load(be, st, dc, opts);
  const EncoderPrecision prec = encoder_precision(be, opts, lm->weight_format());
  auto tower = ClipTower::load(be, st, s.cfg, prec);
  kernels::Buffer newline;
  if (s.cfg.next) {
    const Tensor nl = st.get(tensor_name(layout.naming, "image_newline"));
    newline = kernels::Buffer(be, s.cfg.text.hidden_size);
    const int32_t zero = 0;
    kernels::embedding(be, be.upload(nl.reshape({1, s.cfg.text.hidden_size})), &zero, 1,
                       newline.data());
  }
  Model m;
  m.spec = decoder_model_spec(*lm, dir,
                              {.family = s.cfg.next ? next_family().name : family().name,
                               .architecture = s.cfg.architecture,
                               .eos_token_id = s.cfg.text.eos_token_id,
                               .context_length = context_length(s.cfg.text),
                               .modalities = {Modality::kImage},
                               .config_key = s.config_key});
  m.spec.encoder_precision = prec.describe(s.cfg.vision_layers_used());
  m.spec.encoder_blocks = s.cfg.vision_layers_used();
  m.processor = make_processor(s.cfg, s.pp, s.config_key, s.format);
  m.runner = std::make_unique<LlavaRunner>(be, std::move(st), std::move(lm), std::move(tower),
                                           s.cfg, std::move(newline));
  return m;
}

std::unique_ptr<Processor> load_processor(const std::string& dir) {
  const Settings s = read_settings(dir);
  return make_processor(s.cfg, s.pp, s.config_key, s.format);
}

Inspection inspect(const std::string& dir) {
  const Settings s = read_settings(dir);
  const io::SafeTensors st = io::SafeTensors::open(dir);
  const Layout layout = check_checkpoint(st, s.cfg);
  const Config& c = s.cfg;
  const TextConfig& t = c.text;
  const VisionConfig& v = c.vision;
  using ll = long long;
  std::string pins;
  for (const Resolution& p : c.image_grid_pinpoints)
    pins += (pins.empty() ? "" : ", ") + std::to_string(p.height) + "x" + std::to_string(p.width);
  Inspection r;
  r.vocab_size = t.vocab_size;
  r.lines.emplace_back("architecture",
                       inspect_text("%s (model_type %s, torch_dtype %s)", c.architecture.c_str(),
                                    c.model_type.c_str(), c.torch_dtype.c_str()));
  r.lines.emplace_back(
      "text",
      inspect_text("%s: hidden %lld, layers %lld, heads %lld (head_dim %lld), kv heads %lld, "
                   "intermediate %lld, vocab %lld, rope_theta %g, rms_norm_eps %g",
                   t.model_type.c_str(), ll(t.hidden_size), ll(t.num_hidden_layers),
                   ll(t.num_attention_heads), ll(t.heads_dim()), ll(t.num_key_value_heads),
                   ll(t.intermediate_size), ll(t.vocab_size), t.rope_theta, t.rms_norm_eps));
  r.lines.emplace_back("context", inspect_text("%lld positions", ll(context_length(t))));
  r.lines.emplace_back(
      "vision",
      inspect_text("CLIP: hidden %lld, layers %lld (%lld run: feature layer %lld, %s), heads "
                   "%lld, mlp %lld, image %lld, patch %lld (%lld tokens a crop), %s",
                   ll(v.hidden_size), ll(v.num_hidden_layers), ll(c.vision_layers_used()),
                   ll(c.vision_feature_layer), c.vision_feature_select_strategy.c_str(),
                   ll(v.num_attention_heads), ll(v.intermediate_size), ll(v.image_size),
                   ll(v.patch_size), ll(v.side() * v.side()), v.hidden_act.c_str()));
  r.lines.emplace_back("images", c.next ? "anyres over " + pins + " (+ the base image)"
                                        : "one " + std::to_string(v.image_size) + " crop");
  r.lines.emplace_back("tokens", inspect_text("bos %lld, eos %lld, image %lld", ll(t.bos_token_id),
                                              ll(t.eos_token_id), ll(c.image_token_index)));
  r.lines.emplace_back("chat", s.format == ChatFormat::kMistral ? "[INST] ... [/INST] (Mistral)"
                                                                : "USER: ... ASSISTANT: (Vicuna)");
  r.lines.emplace_back("naming", layout.naming == Naming::kOld
                                     ? "old (language_model.model.*, vision_tower.*)"
                                     : "new (model.language_model.*, model.vision_tower.*)");
  r.lines.emplace_back("lm_head", layout.tied ? "tied to embed_tokens" : "separate (untied)");
  return r;
}

}  // namespace

const ModelFamily& next_family() {
  static const ModelFamily f{
      .name = "llava-next",
      .architectures = {"LlavaNextForConditionalGeneration"},
      .model_types = {"llava_next"},
      .tiny_sizes = {"tiny", "7b-shape-4l"},
      .load = &load,
      .ops = ops_of({kDecoderOps, kClipTowerOps}),
      .inspect = &inspect,
      .load_processor = &load_processor,
  };
  return f;
}

const ModelFamily& family() {
  static const ModelFamily f{
      .name = "llava",
      .architectures = {"LlavaForConditionalGeneration"},
      .model_types = {"llava"},
      .tiny_sizes = {"tiny", "7b-shape-4l"},
      .load = &load,
      .ops = ops_of({kDecoderOps, kClipTowerOps}),
      .inspect = &inspect,
      .load_processor = &load_processor,
  };
  return f;
}

}  // namespace mmrt::models::llava
