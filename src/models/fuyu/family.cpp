// Fuyu behind the model seam: the loader (config, preprocessing settings, the tokenizer's image
// ids, every tensor checked, the shared decoder as Persimmon and the patch embedding), the
// Runner, inspect and make-tiny-model. Fuyu has no vision encoder: its "encoder" is one matrix
// multiply (vision_embed_tokens), run as an encoder job like any other so the engine's encoder
// cache and scheduling serve it unchanged.
#include "models/fuyu/family.h"

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/json_fields.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "kernels/layout.h"
#include "kernels/scratch.h"
#include "models/checkpoint.h"
#include "models/decoder/decoder.h"
#include "models/decoder/decoder_runner.h"
#include "models/decoder/model_spec.h"
#include "models/fuyu/processor.h"
#include "models/fuyu/weights_spec.h"

namespace fs = std::filesystem;

namespace mmrt::models::fuyu {

namespace {

// Fuyu's encoder is the patch projection: one linear layer.
constexpr kernels::Op kFuyuEncoderOps[] = {kernels::Op::kLinear};

struct Settings {
  Config cfg;
  ImageProcessorConfig pp;
  TokenIds ids;
  Hash128 config_key;
};

// The ids the processor writes, as the checkpoint's tokenizer has them: |SPEAKER| (the one
// config.json names), |NEWLINE|, <s>, and the <0x04> piece its beginning-of-answer marker text
// must encode to.
TokenIds token_ids(const std::string& dir, const Config& cfg) {
  const io::Tokenizer tok = load_tokenizer(dir);
  const std::string origin = (fs::path(dir) / "tokenizer.json").string();
  const TokenIds ids = prompt_token_ids(tok, origin);
  if (ids.speaker != cfg.image_token_id)
    throw FormatError(origin + ": \"|SPEAKER|\" is token " + std::to_string(ids.speaker) +
                      ", not config.json's image_token_id " + std::to_string(cfg.image_token_id));
  return ids;
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
  s.pp = pp ? ImageProcessorConfig::from_json(pp->text, pp->path) : ImageProcessorConfig{};
  if (s.pp.patch_height != s.cfg.patch_size || s.pp.patch_width != s.cfg.patch_size)
    throw FormatError((pp ? pp->path : (fs::path(dir) / "preprocessor_config.json").string()) +
                      ": patch_size " + std::to_string(s.pp.patch_height) + "x" +
                      std::to_string(s.pp.patch_width) + " disagrees with config.json's " +
                      std::to_string(s.cfg.patch_size));
  s.ids = token_ids(dir, s.cfg);
  s.config_key = hash128(text);
  return s;
}

class FuyuRunner final : public DecoderRunner {
 public:
  FuyuRunner(const kernels::Backend& be, io::SafeTensors st, std::unique_ptr<Decoder> lm,
             kernels::PackedLinear patch_embed, int64_t patch_dim, int32_t newline_id)
      : DecoderRunner(be, std::move(st), std::move(lm)),
        patch_embed_(std::move(patch_embed)),
        patch_dim_(patch_dim),
        newline_(be, lm_->config().hidden_size) {
    lm_->embed({&newline_id, 1}, newline_.data());
  }

  // The patches through vision_embed_tokens, laid out as the item's token run: each grid row's
  // patch embeddings, then the |NEWLINE| token's own embedding.
  Tensor encode(const PreparedMedia& item) override {
    const ImageGeometry g = item_geometry(item, patch_dim_);
    if (item.features.rank() != 2) throw InvalidArgument("fuyu: an image item has no patches");
    const int64_t H = static_cast<int64_t>(newline_.size());
    const Tensor px = be_.upload(item.features.contiguous());  // the features on the device
    kernels::Buffer emb(be_, g.n_patches() * H);               // [n_patches, hidden]
    kernels::linear(be_, px.data<float>(), g.n_patches(), patch_embed_, emb.data());
    Tensor out = be_.empty(DType::kF32, {g.n_tokens(), H});  // [n_tokens, hidden]
    // Each grid row's g.cols patch rows, then the newline row: rows of (g.cols + 1) * H.
    float* o = out.data<float>();
    const int64_t row = (g.cols + 1) * H;
    kernels::copy2d(be_, o, row, emb.data(), g.cols * H, g.rows, g.cols * H);
    for (int64_t r = 0; r < g.rows; ++r)
      kernels::copy2d(be_, o + r * row + g.cols * H, H, newline_.data(), H, 1, H);
    return out;
  }
  double encode_flops(const PreparedMedia& item) const override {
    const ImageGeometry g = item_geometry(item, patch_dim_);
    return 2.0 * static_cast<double>(g.n_patches()) * static_cast<double>(patch_dim_) *
           static_cast<double>(newline_.size());
  }

 private:
  kernels::PackedLinear patch_embed_;  // [hidden, patch_dim] + bias
  int64_t patch_dim_;
  kernels::Buffer newline_;  // the |NEWLINE| embedding [hidden], the backend's memory
};

Model load(const kernels::Backend& be, const std::string& dir, const LoadOptions& opts) {
  const Settings s = read_settings(dir);
  io::SafeTensors st = io::SafeTensors::open(dir);
  const Layout layout = check_checkpoint(st, s.cfg);  // every tensor, before any compute
  DecoderConfig dc = decoder_config(s.cfg, layout.naming);
  dc.tied_embeddings = layout.tied;
  auto lm = Decoder::load(be, st, dc, opts);
  const Tensor w = st.get(tensor_name(layout.naming, "vision_embed_tokens.weight"));
  const Tensor b = st.get(tensor_name(layout.naming, "vision_embed_tokens.bias"));
  kernels::PackedLinear patch_embed = kernels::PackedLinear::pack(
      be, w, &b, lm->weight_format(), kernels::WeightPlacement::kViewIfPossible);
  Model m;
  m.spec = decoder_model_spec(*lm, dir,
                              {.family = family().name,
                               .architecture = s.cfg.architecture,
                               .eos_token_id = s.cfg.text.eos_token_id,
                               .context_length = s.cfg.text.max_position_embeddings,
                               .modalities = {Modality::kImage},
                               .config_key = s.config_key});
  m.processor = make_processor(s.cfg, s.pp, s.ids, s.config_key);
  m.runner = std::make_unique<FuyuRunner>(be, std::move(st), std::move(lm), std::move(patch_embed),
                                          s.cfg.patch_dim(), s.ids.newline);
  return m;
}

std::unique_ptr<Processor> load_processor(const std::string& dir) {
  const Settings s = read_settings(dir);
  return make_processor(s.cfg, s.pp, s.ids, s.config_key);
}

Inspection inspect(const std::string& dir) {
  const Settings s = read_settings(dir);
  const io::SafeTensors st = io::SafeTensors::open(dir);
  const Layout layout = check_checkpoint(st, s.cfg);
  const Config& c = s.cfg;
  const TextConfig& t = c.text;
  using ll = long long;
  Inspection r;
  r.vocab_size = t.vocab_size;
  r.lines.emplace_back("architecture",
                       inspect_text("%s (model_type %s, torch_dtype %s)", c.architecture.c_str(),
                                    c.model_type.c_str(), c.torch_dtype.c_str()));
  r.lines.emplace_back(
      "text", inspect_text("persimmon: hidden %lld, layers %lld, heads %lld (head_dim %lld, %lld "
                           "rotated), intermediate %lld (%s), vocab %lld, rope_theta %g, "
                           "layer_norm_eps %g, qk_layernorm %s",
                           ll(t.hidden_size), ll(t.num_hidden_layers), ll(t.num_attention_heads),
                           ll(t.head_dim()), ll(t.rotary_dim()), ll(t.intermediate_size),
                           t.hidden_act.c_str(), ll(t.vocab_size), t.rope_theta, t.layer_norm_eps,
                           t.qk_layernorm ? "on" : "off"));
  r.lines.emplace_back("context", inspect_text("%lld positions", ll(t.max_position_embeddings)));
  r.lines.emplace_back("images",
                       inspect_text("%lldx%lld patches (%lld values) into vision_embed_tokens; "
                                    "downscaled above %lldx%lld",
                                    ll(c.patch_size), ll(c.patch_size), ll(c.patch_dim()),
                                    ll(s.pp.target_height), ll(s.pp.target_width)));
  r.lines.emplace_back("tokens", inspect_text("bos %lld, eos %lld, |SPEAKER| %lld, |NEWLINE| %lld",
                                              ll(t.bos_token_id), ll(t.eos_token_id),
                                              ll(s.ids.speaker), ll(s.ids.newline)));
  r.lines.emplace_back("naming", layout.naming == Naming::kOld
                                     ? "old (language_model.model.*, vision_embed_tokens.*)"
                                     : "new (model.language_model.*, model.vision_embed_tokens.*)");
  r.lines.emplace_back("lm_head", layout.tied ? "tied to embed_tokens" : "separate (untied)");
  return r;
}

}  // namespace

const ModelFamily& family() {
  static const ModelFamily f{
      .name = "fuyu",
      .architectures = {"FuyuForCausalLM"},
      .model_types = {"fuyu"},
      .tiny_sizes = {"tiny", "8b-shape-4l"},
      .load = &load,
      .ops = ops_of({kDecoderOps, kFuyuEncoderOps}),
      .inspect = &inspect,
      .load_processor = &load_processor,
  };
  return f;
}

}  // namespace mmrt::models::fuyu
