// Random Qwen2-VL checkpoints in the exact Hugging Face folder layout.
#include "models/qwen2_vl/tiny_checkpoint.h"

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/qwen2_vl/weights_spec.h"
#include "models/tiny_common.h"

namespace mmrt::models::qwen2_vl {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The Qwen2-VL instruct chat template (tokenizer_config.json "chat_template").
constexpr const char* kChatTemplate =
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}"
    "Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

constexpr int64_t kModelMaxLength = 32768;

std::string preprocessor_config_json(const Config& c) {
  json j;
  j["do_convert_rgb"] = true;
  j["do_normalize"] = true;
  j["do_rescale"] = true;
  j["do_resize"] = true;
  j["image_mean"] = {0.48145466, 0.4578275, 0.40821073};
  j["image_processor_type"] = "Qwen2VLImageProcessor";
  j["image_std"] = {0.26862954, 0.26130258, 0.27577711};
  j["max_pixels"] = 12845056;
  j["merge_size"] = c.vision.spatial_merge_size;
  j["min_pixels"] = 3136;
  j["patch_size"] = c.vision.patch_size;
  j["processor_class"] = "Qwen2VLProcessor";
  j["resample"] = 3;
  j["rescale_factor"] = 0.00392156862745098;
  j["temporal_patch_size"] = c.vision.temporal_patch_size;
  return j.dump(2) + "\n";
}

}  // namespace

const std::vector<std::string>& special_tokens() {
  static const std::vector<std::string> tokens = {
      "<|endoftext|>",      "<|im_start|>",     "<|im_end|>",     "<|object_ref_start|>",
      "<|object_ref_end|>", "<|box_start|>",    "<|box_end|>",    "<|quad_start|>",
      "<|quad_end|>",       "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
      "<|image_pad|>",      "<|video_pad|>"};
  return tokens;
}

TinySize parse_tiny_size(const std::string& s) {
  if (s == "tiny") return TinySize::kTiny;
  if (s == "small") return TinySize::kSmall;
  if (s == "2b-shape") return TinySize::k2BShape;
  throw InvalidArgument("unknown model size '" + s + "' (expected tiny, small or 2b-shape)");
}

const char* tiny_size_name(TinySize s) {
  switch (s) {
    case TinySize::kTiny:
      return "tiny";
    case TinySize::kSmall:
      return "small";
    case TinySize::k2BShape:
      return "2b-shape";
  }
  return "?";
}

Config tiny_base_config(TinySize size) {
  Config c;  // the defaults are Qwen2-VL-2B's
  c.text.rope_theta = 1e6;
  c.text.rms_norm_eps = 1e-6;
  c.text.max_position_embeddings = 32768;
  c.text.vocab_size = 0;  // the tokenizer's (rounded up); the 2b shape takes the real one
  switch (size) {
    case TinySize::kTiny:
      c.text.hidden_size = 64;
      c.text.num_hidden_layers = 2;
      c.text.num_attention_heads = 4;
      c.text.num_key_value_heads = 2;
      c.text.intermediate_size = 128;
      c.text.mrope_section = {2, 3, 3};
      c.text.tie_word_embeddings = false;
      c.vision.depth = 2;
      c.vision.embed_dim = 32;
      c.vision.num_heads = 2;
      c.vision.mlp_ratio = 4;
      break;
    case TinySize::kSmall:
      c.text.hidden_size = 768;
      c.text.num_hidden_layers = 12;
      c.text.num_attention_heads = 12;
      c.text.num_key_value_heads = 2;
      c.text.intermediate_size = 2048;
      c.text.mrope_section = {8, 12, 12};
      c.text.tie_word_embeddings = true;
      c.vision.depth = 4;
      c.vision.embed_dim = 384;
      c.vision.num_heads = 6;
      c.vision.mlp_ratio = 4;
      break;
    case TinySize::k2BShape:
      c.text.hidden_size = 1536;
      c.text.num_hidden_layers = 28;
      c.text.num_attention_heads = 12;
      c.text.num_key_value_heads = 2;
      c.text.intermediate_size = 8960;
      c.text.vocab_size = 151936;
      c.text.mrope_section = {16, 24, 24};
      c.text.tie_word_embeddings = true;
      c.vision.depth = 32;
      c.vision.embed_dim = 1280;
      c.vision.num_heads = 16;
      c.vision.mlp_ratio = 4;
      break;
  }
  c.vision.hidden_size = c.text.hidden_size;
  return c;
}

TinyResult make_tiny_checkpoint(const std::string& out_dir, const TinyOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  tiny::check_dtype(opts.dtype);
  const fs::path dir = tiny::create_output_dir(out_dir);

  TinyResult res;
  Config& c = res.config;
  c = opts.family ? opts.family->base : tiny_base_config(opts.size);
  // Tokenizer first: its special-token ids go into config.json. A preset with a vocabulary of
  // its own (a real shape) keeps it, its special tokens at their real ids; the others take the
  // tokenizer's (1000 tokens for a unit-test width, else 8000).
  const bool real_vocab = c.text.vocab_size > 0;
  tiny::TokenizerOptions to;
  to.path = opts.tokenizer_path;
  to.vocab_size = c.text.hidden_size < 128 ? 1000 : 8000;
  to.specials = special_tokens();
  if (real_vocab) to.special_first_id = 151643;
  const tiny::Tokenizer tok = tiny::make_tokenizer(to);

  if (opts.tied) c.text.tie_word_embeddings = *opts.tied;
  c.torch_dtype = opts.dtype == DType::kBF16 ? "bfloat16" : "float32";
  if (real_vocab) {
    if (tok.facts.size > c.text.vocab_size)
      throw InvalidArgument(tok.origin + ": " + std::to_string(tok.facts.size) +
                            " tokens do not fit the preset's vocabulary of " +
                            std::to_string(c.text.vocab_size));
  } else {
    c.text.vocab_size = tiny::round_up(tok.facts.size, 64);
  }
  auto id = [&](const char* token) { return tiny::special_id(tok, token, "Qwen2-VL"); };
  const int64_t endoftext = id("<|endoftext|>");
  c.text.bos_token_id = endoftext;
  c.text.eos_token_id = id("<|im_end|>");
  c.vision_start_token_id = id("<|vision_start|>");
  c.vision_end_token_id = id("<|vision_end|>");
  c.vision_token_id = id("<|vision_pad|>");
  c.image_token_id = id("<|image_pad|>");
  c.video_token_id = id("<|video_pad|>");
  if (!opts.family) c.validate("make-tiny-model config");
  res.tokenizer_size = tok.facts.size;

  tiny::write_file(dir / "config.json",
                   opts.family ? opts.family->config_json(c) : config_to_json(c));
  tiny::write_file(dir / "tokenizer.json", tok.text);
  tiny::write_file(
      dir / "tokenizer_config.json",
      tiny::tokenizer_config_json(tok.facts, special_tokens(), kChatTemplate, kModelMaxLength));
  tiny::write_file(
      dir / "generation_config.json",
      tiny::generation_config_json(c.text.bos_token_id, c.text.eos_token_id, endoftext));
  tiny::write_file(dir / "preprocessor_config.json", preprocessor_config_json(c));
  res.files = {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
               "preprocessor_config.json"};

  // Weights, produced while writing.
  std::vector<tiny::TensorSpec> tensors;
  const std::vector<ExpectedTensor> expected =
      opts.family ? opts.family->tensors(c, c.text.tie_word_embeddings)
                  : expected_tensors(c, c.text.tie_word_embeddings);
  for (const ExpectedTensor& e : expected)
    tensors.push_back({e.name, tensor_name(opts.naming, e.name), e.shape, is_norm_param(e.name)});
  const tiny::WrittenWeights w = tiny::write_random_weights(
      out_dir, tensors, {opts.seed, opts.dtype, opts.max_shard_bytes, opts.pool, opts.progress});
  res.files.insert(res.files.end(), w.files.begin(), w.files.end());
  res.n_tensors = w.n_tensors;
  res.n_params = w.n_params;
  res.n_bytes = w.n_bytes;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

// make-tiny-model --arch qwen2-vl: the family's writer behind the common options.
TinyModelResult make_tiny_model(const std::string& dir, const TinyModelOptions& o) {
  return make_tiny_model(dir, o, std::nullopt, "qwen2-vl");
}

TinyModelResult make_tiny_model(const std::string& dir, const TinyModelOptions& o,
                                std::optional<TinyOptions::Family> family, const char* name) {
  TinyOptions q;
  if (!family) q.size = parse_tiny_size(o.size);
  q.family = std::move(family);
  q.seed = o.seed;
  q.dtype = o.dtype;
  q.tokenizer_path = o.tokenizer_path;
  if (o.naming.empty() || o.naming == "old")
    q.naming = Naming::kOld;
  else if (o.naming == "new")
    q.naming = Naming::kNew;
  else
    throw InvalidArgument(std::string(name) + ": --naming must be old or new, got '" + o.naming +
                          "'");
  q.tied = o.tied;
  q.max_shard_bytes = o.max_shard_bytes;
  q.pool = o.pool;
  q.progress = o.progress;
  const TinyResult t = make_tiny_checkpoint(dir, q);
  TinyModelResult r;
  r.summary = std::string(name) + ", " + (q.family ? o.size : tiny_size_name(q.size)) + ", " +
              (q.dtype == DType::kBF16 ? "bf16" : "f32") + ", " +
              (q.naming == Naming::kOld ? "old" : "new") + " names, " +
              (t.config.text.tie_word_embeddings ? "tied" : "untied") + " lm_head";
  r.files = t.files;
  r.n_tensors = t.n_tensors;
  r.n_params = t.n_params;
  r.n_bytes = t.n_bytes;
  r.tokenizer_size = t.tokenizer_size;
  r.vocab_size = t.config.text.vocab_size;
  r.seconds = t.seconds;
  return r;
}

}  // namespace mmrt::models::qwen2_vl
