// Qwen2-Audio behind the model seam: the loader (config, preprocessor config, every tensor
// checked, the shared decoder and the audio tower), the Runner, inspect and make-tiny-model.
#include "models/qwen2_audio/family.h"

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/json_fields.h"
#include "io/safetensors.h"
#include "models/checkpoint.h"
#include "models/decoder/decoder.h"
#include "models/decoder/decoder_runner.h"
#include "models/decoder/model_spec.h"
#include "models/qwen2_audio/audio_tower.h"
#include "models/qwen2_audio/config.h"
#include "models/qwen2_audio/feature_extractor.h"
#include "models/qwen2_audio/processor.h"
#include "models/qwen2_audio/weights_spec.h"

namespace fs = std::filesystem;

namespace mmrt::models::qwen2_audio {

namespace {

// What every command reads from the folder before anything else: the validated config.json,
// preprocessor_config.json (class defaults when absent) checked against the encoder, and the
// hash of config.json that enters every media key.
struct Settings {
  Config cfg;
  FeatureExtractorConfig fe;
  Hash128 config_key;
};

Settings read_settings(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) throw NotFound("model folder '" + dir + "' has no config.json");
  const std::string text = io::read_text_file(path);
  Settings s;
  s.cfg = parse_config(text, path);
  s.cfg.validate(path);
  const std::optional<CheckpointFile> pp = read_preprocessor_config(dir);
  s.fe = pp ? FeatureExtractorConfig::from_json(pp->text, pp->path) : FeatureExtractorConfig{};
  s.fe.check_against(s.cfg.audio,
                     pp ? pp->path : (fs::path(dir) / "preprocessor_config.json").string());
  s.config_key = hash128(text);
  return s;
}

class Qwen2AudioRunner final : public DecoderRunner {
 public:
  Qwen2AudioRunner(const kernels::Backend& be, io::SafeTensors st, std::unique_ptr<Decoder> lm,
                   std::unique_ptr<AudioTower> tower, const AudioConfig& audio)
      : DecoderRunner(be, std::move(st), std::move(lm)), tower_(std::move(tower)), audio_(audio) {}

  // Each window through the tower, the token rows concatenated in window order.
  Tensor encode(const PreparedMedia& item) override {
    Tensor out = encode_job(item)->run_rest();
    if (out.dim(0) != item.n_tokens)
      throw InternalError("audio tower produced " + std::to_string(out.dim(0)) +
                          " rows for an item of " + std::to_string(item.n_tokens) + " tokens");
    return out;
  }
  // A layer a part, window after window; one part for an item the encoder refuses (encode() says
  // why: the scheduler asks when it adds the request, where nothing may throw).
  int64_t encode_parts(const PreparedMedia& item) const override {
    const int64_t W = item.dims.size() > 2 ? static_cast<int64_t>(item.dims.size()) - 2 : 0;
    const Tensor& f = item.features;
    const bool ok = item.modality == Modality::kAudio && W > 0 && f.dtype() == DType::kF32 &&
                    f.rank() == 3 && f.dim(0) == W && f.dim(1) == audio_.num_mel_bins &&
                    f.dim(2) == audio_.n_frames();
    return ok ? W * tower_->parts() : 1;
  }
  std::unique_ptr<EncodeJob> encode_job(const PreparedMedia& item) override {
    const std::vector<int64_t> frames = window_frames(item, audio_);
    const int64_t W = static_cast<int64_t>(frames.size()), C = audio_.num_mel_bins,
                  T = audio_.n_frames();
    const Tensor& f = item.features;
    if (f.dtype() != DType::kF32 || f.rank() != 3 || f.dim(0) != W || f.dim(1) != C ||
        f.dim(2) != T)
      throw InvalidArgument("qwen2-audio: features must be f32 [" + std::to_string(W) + ", " +
                            std::to_string(C) + ", " + std::to_string(T) + "], got " +
                            f.describe());
    Tensor mel = be_.upload(f.contiguous());  // the features on the device, as long as the job
    std::vector<std::unique_ptr<EncodeJob>> windows;
    for (int64_t k = 0; k < W; ++k)
      windows.push_back(
          tower_->begin({mel.data<float>() + k * C * T, static_cast<size_t>(C * T)}, frames[k]));
    return concat_jobs(be_, std::move(windows), tower_->out_hidden(), std::move(mel));
  }
  double encode_flops(const PreparedMedia& item) const override {
    double f = 0;
    for (int64_t L : window_frames(item, audio_)) f += tower_->flops(L);
    return f;
  }

 private:
  std::unique_ptr<AudioTower> tower_;
  AudioConfig audio_;
};

Model load(const kernels::Backend& be, const std::string& dir, const LoadOptions& opts) {
  const Settings s = read_settings(dir);
  io::SafeTensors st = io::SafeTensors::open(dir);
  const Layout layout = check_checkpoint(st, s.cfg);  // every tensor, before any compute
  DecoderConfig dc = decoder_config(s.cfg);
  dc.tied_embeddings = layout.tied;
  auto lm = Decoder::load(be, st, dc, opts);
  const EncoderPrecision prec = encoder_precision(be, opts, lm->weight_format());
  auto tower = AudioTower::load(be, st, s.cfg, prec);
  Model m;
  m.spec = decoder_model_spec(*lm, dir,
                              {.family = family().name,
                               .architecture = s.cfg.architecture,
                               .eos_token_id = s.cfg.text.eos_token_id,
                               .context_length = s.cfg.text.max_position_embeddings,
                               .modalities = {Modality::kAudio},
                               .config_key = s.config_key});
  m.spec.encoder_precision = prec.describe(s.cfg.audio.encoder_layers);
  m.spec.encoder_blocks = s.cfg.audio.encoder_layers;
  m.processor = make_processor(s.cfg, s.fe, s.config_key, opts.long_audio);
  m.runner = std::make_unique<Qwen2AudioRunner>(be, std::move(st), std::move(lm), std::move(tower),
                                                s.cfg.audio);
  return m;
}

std::unique_ptr<Processor> load_processor(const std::string& dir) {
  const Settings s = read_settings(dir);
  return make_processor(s.cfg, s.fe, s.config_key, LoadOptions{}.long_audio);
}

Inspection inspect(const std::string& dir) {
  const Settings s = read_settings(dir);
  const io::SafeTensors st = io::SafeTensors::open(dir);
  const Layout layout = check_checkpoint(st, s.cfg);
  const Config& c = s.cfg;
  const TextConfig& t = c.text;
  const AudioConfig& a = c.audio;
  const FeatureExtractorConfig& fe = s.fe;
  using ll = long long;
  Inspection r;
  r.vocab_size = t.vocab_size;
  r.lines.emplace_back("architecture",
                       inspect_text("%s (model_type %s, torch_dtype %s)", c.architecture.c_str(),
                                    c.model_type.c_str(), c.torch_dtype.c_str()));
  r.lines.emplace_back(
      "text", inspect_text("hidden %lld, layers %lld, heads %lld (head_dim %lld), kv heads %lld, "
                           "intermediate %lld, vocab %lld, rope_theta %g, rms_norm_eps %g",
                           ll(t.hidden_size), ll(t.num_hidden_layers), ll(t.num_attention_heads),
                           ll(t.head_dim()), ll(t.num_key_value_heads), ll(t.intermediate_size),
                           ll(t.vocab_size), t.rope_theta, t.rms_norm_eps));
  r.lines.emplace_back("context", inspect_text("%lld positions", ll(t.max_position_embeddings)));
  r.lines.emplace_back(
      "audio",
      inspect_text("mels %lld, layers %lld, d_model %lld, heads %lld (head_dim %lld), ffn %lld, "
                   "positions %lld, out %lld",
                   ll(a.num_mel_bins), ll(a.encoder_layers), ll(a.d_model),
                   ll(a.encoder_attention_heads), ll(a.head_dim()), ll(a.encoder_ffn_dim),
                   ll(a.max_source_positions), ll(t.hidden_size)));
  r.lines.emplace_back("tokens", inspect_text("bos %lld, eos %lld, audio %lld", ll(t.bos_token_id),
                                              ll(t.eos_token_id), ll(c.audio_token_index)));
  r.lines.emplace_back("naming", "language_model.*, audio_tower.*, multi_modal_projector.*");
  r.lines.emplace_back("lm_head", layout.tied ? "tied to embed_tokens" : "separate (untied)");
  r.lines.emplace_back(
      "features",
      inspect_text("whisper log-mel %lld x %lld per %g s window (%lld samples at %lld Hz, "
                   "hop %lld, n_fft %lld), %lld tokens per full window",
                   ll(fe.feature_size), ll(fe.n_frames()), fe.seconds(fe.n_samples),
                   ll(fe.n_samples), ll(fe.sampling_rate), ll(fe.hop_length), ll(fe.n_fft),
                   ll(audio_tokens(fe.n_frames()))));
  return r;
}

}  // namespace

const ModelFamily& family() {
  static const ModelFamily f{
      .name = "qwen2-audio",
      .architectures = {"Qwen2AudioForConditionalGeneration"},
      .model_types = {"qwen2_audio"},
      .tiny_sizes = {"tiny", "hf-tester", "small", "tower-7b-shape"},
      .load = &load,
      .ops = ops_of({kDecoderOps, kAudioTowerOps}),
      .inspect = &inspect,
      .load_processor = &load_processor,
  };
  return f;
}

}  // namespace mmrt::models::qwen2_audio
