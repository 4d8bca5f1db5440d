// Random Qwen2-Audio checkpoints in the exact Hugging Face folder layout.
#include "models/qwen2_audio/tiny_checkpoint.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/qwen2_audio/chat_template.h"
#include "models/qwen2_audio/weights_spec.h"
#include "models/tiny_common.h"

namespace mmrt::models::qwen2_audio {

namespace {

constexpr int32_t kFirstSpecialId = 151643;  // the real tokenizer's <|endoftext|>

std::string preprocessor_config_json(const FeatureExtractorConfig& f) {
  nlohmann::ordered_json j;
  if (f.chunk_length == static_cast<double>(static_cast<int64_t>(f.chunk_length)))
    j["chunk_length"] = static_cast<int64_t>(f.chunk_length);
  else
    j["chunk_length"] = f.chunk_length;
  j["feature_extractor_type"] = "WhisperFeatureExtractor";
  j["feature_size"] = f.feature_size;
  j["hop_length"] = f.hop_length;
  j["n_fft"] = f.n_fft;
  j["n_samples"] = f.n_samples;
  j["nb_max_frames"] = f.n_frames();
  j["padding_side"] = "right";
  j["padding_value"] = 0.0;
  j["processor_class"] = "Qwen2AudioProcessor";
  j["return_attention_mask"] = true;
  j["sampling_rate"] = f.sampling_rate;
  return j.dump(2) + "\n";
}

}  // namespace

const std::vector<std::string>& special_tokens() {
  static const std::vector<std::string> tokens = {
      "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>"};
  return tokens;
}

TinySize parse_tiny_size(const std::string& s) {
  if (s == "tiny") return TinySize::kTiny;
  if (s == "hf-tester") return TinySize::kHfTester;
  if (s == "small") return TinySize::kSmall;
  if (s == "tower-7b-shape") return TinySize::kTower7bShape;
  throw InvalidArgument("unknown qwen2-audio model size '" + s +
                        "' (expected tiny, hf-tester, small or tower-7b-shape)");
}

const char* tiny_size_name(TinySize s) {
  switch (s) {
    case TinySize::kTiny:
      return "tiny";
    case TinySize::kSmall:
      return "small";
    case TinySize::kTower7bShape:
      return "tower-7b-shape";
    case TinySize::kHfTester:
      break;
  }
  return "hf-tester";
}

Config tiny_base_config(TinySize size) {
  Config c;
  TextConfig& t = c.text;
  AudioConfig& a = c.audio;
  t.hidden_size = 64;
  t.num_hidden_layers = 2;
  t.num_attention_heads = 4;
  t.max_position_embeddings = 8192;  // Qwen2-Audio-7B's
  t.rms_norm_eps = 1e-5;
  t.rope_theta = 10000;
  t.tie_word_embeddings = false;
  a.encoder_layers = 2;
  a.encoder_attention_heads = 4;
  if (size == TinySize::kTiny) {
    t.intermediate_size = 128;
    t.num_key_value_heads = 4;
    a.num_mel_bins = 128;
    a.d_model = 32;
    a.encoder_ffn_dim = 64;
    a.max_source_positions = 1500;
  } else if (size == TinySize::kSmall) {
    t.hidden_size = 512;
    t.num_hidden_layers = 12;
    t.num_attention_heads = 8;
    t.num_key_value_heads = 8;
    t.intermediate_size = 1408;
    t.tie_word_embeddings = true;
    a.num_mel_bins = 128;
    a.d_model = 64;
    a.encoder_ffn_dim = 256;
    a.max_source_positions = 1500;
  } else if (size == TinySize::kTower7bShape) {
    // Qwen2-Audio-7B's audio tower (models.md section 4) on a small LLM that is not the 7B's.
    t.hidden_size = 512;
    t.num_attention_heads = 8;
    t.num_key_value_heads = 8;
    t.intermediate_size = 1408;
    t.tie_word_embeddings = true;  // the 151680-row vocabulary (specials at their real ids)
    a.num_mel_bins = 128;
    a.d_model = 1280;
    a.encoder_layers = 32;
    a.encoder_attention_heads = 20;
    a.encoder_ffn_dim = 5120;
    a.max_source_positions = 1500;
  } else {
    t.intermediate_size = 36;
    t.num_key_value_heads = 2;
    a.num_mel_bins = 80;
    a.d_model = 16;
    a.encoder_ffn_dim = 16;
    a.max_source_positions = 30;
  }
  return c;
}

FeatureExtractorConfig tiny_feature_config(TinySize size) {
  FeatureExtractorConfig f;
  if (size != TinySize::kHfTester) {
    f.feature_size = 128;
    f.chunk_length = 30;
  } else {
    f.feature_size = 80;
    f.chunk_length = 0.6;  // 60 mel frames = 2 * max_source_positions
  }
  f.n_samples = static_cast<int64_t>(f.chunk_length * static_cast<double>(f.sampling_rate) + 0.5);
  return f;
}

TinyResult make_tiny_checkpoint(const std::string& out_dir, const TinyOptions& opts) {
  const double t0 = tiny::clock_seconds();
  tiny::check_dtype(opts.dtype);
  const auto dir = tiny::create_output_dir(out_dir);
  tiny::Tokenizer tok = tiny::make_tokenizer({.path = opts.tokenizer_path,
                                              .vocab_size = 1000,
                                              .specials = special_tokens(),
                                              .special_first_id = kFirstSpecialId});
  // The specials sit at their real ids above a 1000-token vocabulary: fill the gap and the
  // padding to the embedding rows, so every id the random model samples decodes.
  if (opts.tokenizer_path.empty())
    tiny::fill_unassigned_ids(tok, static_cast<int32_t>(tiny::round_up(tok.facts.size, 64)));

  TinyResult res;
  Config& c = res.config;
  c = tiny_base_config(opts.size);
  res.features = tiny_feature_config(opts.size);
  if (opts.tied) c.text.tie_word_embeddings = *opts.tied;
  c.torch_dtype = opts.dtype == DType::kBF16 ? "bfloat16" : "float32";
  c.text.vocab_size = tiny::round_up(tok.facts.size, 64);
  auto id = [&](const char* token) { return tiny::special_id(tok, token, "Qwen2-Audio"); };
  const int64_t endoftext = id("<|endoftext|>");
  c.text.bos_token_id = endoftext;
  c.text.eos_token_id = id("<|im_end|>");
  c.audio_token_index = id("<|AUDIO|>");
  for (const char* t : {"<|im_start|>", "<|audio_bos|>", "<|audio_eos|>"}) id(t);
  c.validate("make-tiny-model config");
  res.features.check_against(c.audio, "make-tiny-model preprocessor config");

  tiny::write_file(dir / "config.json", config_to_json(c));
  tiny::write_file(dir / "generation_config.json",
                   tiny::generation_config_json(endoftext, c.text.eos_token_id, endoftext));
  tiny::write_file(dir / "preprocessor_config.json", preprocessor_config_json(res.features));
  tiny::write_file(dir / "tokenizer.json", tok.text);
  tiny::write_file(
      dir / "tokenizer_config.json",
      tiny::tokenizer_config_json(tok.facts, special_tokens(), chat_template_jinja(), 32768));
  std::vector<tiny::TensorSpec> tensors;
  for (const ExpectedTensor& e : expected_tensors(c, c.text.tie_word_embeddings))
    tensors.push_back({e.name, tensor_name(e.name), e.shape, is_norm_param(e.name)});
  const tiny::WrittenWeights weights = tiny::write_random_weights(
      out_dir, tensors, {opts.seed, opts.dtype, opts.max_shard_bytes, opts.pool, opts.progress});
  res.info = tiny::report({"config.json", "generation_config.json", "preprocessor_config.json",
                           "tokenizer.json", "tokenizer_config.json"},
                          weights, tok.facts.size, c.text.vocab_size, t0);
  res.info.summary = std::string("qwen2-audio, ") + tiny_size_name(opts.size) +
                     (opts.size == TinySize::kTower7bShape
                          ? " (Qwen2-Audio-7B's audio tower; a small LLM, not the 7B's)"
                          : "") +
                     ", " + (opts.dtype == DType::kBF16 ? "bf16" : "f32") + ", " +
                     (c.text.tie_word_embeddings ? "tied" : "untied") + " lm_head";
  return res;
}

// make-tiny-model --arch qwen2-audio: the family's writer behind the common options.
TinyModelResult make_tiny_model(const std::string& dir, const TinyModelOptions& o) {
  if (!o.naming.empty())
    throw InvalidArgument("qwen2-audio has one tensor-name layout; --naming '" + o.naming +
                          "' does not apply");
  return make_tiny_checkpoint(dir, {.size = parse_tiny_size(o.size),
                                    .seed = o.seed,
                                    .dtype = o.dtype,
                                    .tokenizer_path = o.tokenizer_path,
                                    .tied = o.tied,
                                    .max_shard_bytes = o.max_shard_bytes,
                                    .pool = o.pool,
                                    .progress = o.progress})
      .info;
}

}  // namespace mmrt::models::qwen2_audio
