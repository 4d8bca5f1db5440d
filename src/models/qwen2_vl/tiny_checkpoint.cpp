// Random Qwen2-VL checkpoints in the exact Hugging Face folder layout.
#include "models/qwen2_vl/tiny_checkpoint.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/convert.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/bpe_trainer.h"
#include "io/json_fields.h"
#include "io/safetensors.h"
#include "models/qwen2_vl/weights_spec.h"

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

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

// Element i of a tensor keyed by `key`: a counter-based hash, so any range can be produced
// independently. Sum of the four 16-bit fields (Irwin-Hall, n = 4) standardised to mean 0, var 1.
inline float approx_normal(uint64_t key, uint64_t i) {
  static const float kInvStd = static_cast<float>(1.0 / std::sqrt((65536.0 * 65536.0 - 1) / 3));
  uint64_t x = splitmix64(key ^ (i * 0xD1B54A32D192ED03ull));
  uint32_t s =
      static_cast<uint32_t>((x & 0xFFFF) + ((x >> 16) & 0xFFFF) + ((x >> 32) & 0xFFFF) + (x >> 48));
  return (static_cast<float>(s) - 131070.0f) * kInvStd;
}

enum class Init { kNormal, kOnes, kZeros };

// Fills elements [b, e) of a tensor with its initial values in `dtype`.
void fill_values(void* dst, int64_t b, int64_t e, DType dtype, Init init, uint64_t key, float std) {
  constexpr int64_t kBuf = 4096;
  float tmp[kBuf];
  for (int64_t i = b; i < e; i += kBuf) {
    const int64_t n = std::min(kBuf, e - i);
    float* out = dtype == DType::kF32 ? static_cast<float*>(dst) + (i - b) : tmp;
    if (init == Init::kNormal) {
      for (int64_t k = 0; k < n; ++k)
        out[k] = std * approx_normal(key, static_cast<uint64_t>(i + k));
    } else {
      std::fill(out, out + n, init == Init::kOnes ? 1.0f : 0.0f);
    }
    if (dtype == DType::kBF16)
      f32_to_bf16(tmp, static_cast<uint16_t*>(dst) + (i - b), static_cast<size_t>(n));
  }
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw FailedPrecondition(path.string() + ": cannot write");
}

// What make-tiny-model needs from a tokenizer.json: its size and the added tokens.
struct TokenizerFacts {
  int32_t size = 0;                          // max id + 1 over the vocabulary and the added tokens
  json added_tokens;                         // the "added_tokens" array as stored
  std::map<std::string, int64_t> added_ids;  // content -> id
};

TokenizerFacts read_tokenizer_facts(const std::string& text, const std::string& origin) {
  const json j = io::parse_json(text, origin);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object() ||
      !j["model"].contains("vocab") || !j["model"]["vocab"].is_object())
    throw FormatError(origin + ": no model.vocab object (not a BPE tokenizer.json)");
  TokenizerFacts f;
  int64_t max_id = -1;
  for (const auto& [piece, id] : j["model"]["vocab"].items()) {
    if (!id.is_number_integer())
      throw FormatError(origin + ": vocab id of '" + piece + "' is not an integer");
    max_id = std::max<int64_t>(max_id, id.get<int64_t>());
  }
  f.added_tokens = j.value("added_tokens", json::array());
  if (!f.added_tokens.is_array()) throw FormatError(origin + ": \"added_tokens\" is not an array");
  for (const auto& t : f.added_tokens) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string())
      throw FormatError(origin + ": an added_tokens entry lacks an integer id or string content");
    int64_t id = t["id"].get<int64_t>();
    f.added_ids[t["content"].get<std::string>()] = id;
    max_id = std::max(max_id, id);
  }
  f.size = static_cast<int32_t>(max_id + 1);
  return f;
}

int64_t special_id(const TokenizerFacts& f, const std::string& token, const std::string& origin) {
  auto it = f.added_ids.find(token);
  if (it == f.added_ids.end())
    throw InvalidArgument(origin + ": the tokenizer has no " + token +
                          " added token, which Qwen2-VL needs");
  return it->second;
}

std::string tokenizer_config_json(const TokenizerFacts& f) {
  json decoder = json::object();
  for (const auto& t : f.added_tokens) {
    json e;
    e["content"] = t["content"];
    for (const char* k : {"lstrip", "normalized", "rstrip", "single_word", "special"})
      e[k] = t.value(k, std::string(k) == "special");
    decoder[std::to_string(t["id"].get<int64_t>())] = e;
  }
  json additional = json::array();
  for (const auto& s : special_tokens())
    if (s != "<|endoftext|>" && f.added_ids.count(s)) additional.push_back(s);
  json j;
  j["add_prefix_space"] = false;
  j["added_tokens_decoder"] = decoder;
  j["additional_special_tokens"] = additional;
  j["bos_token"] = nullptr;
  j["chat_template"] = kChatTemplate;
  j["clean_up_tokenization_spaces"] = false;
  j["eos_token"] = "<|im_end|>";
  j["errors"] = "replace";
  j["model_max_length"] = kModelMaxLength;
  j["pad_token"] = "<|endoftext|>";
  j["split_special_tokens"] = false;
  j["tokenizer_class"] = "Qwen2Tokenizer";
  j["unk_token"] = nullptr;
  return j.dump(2) + "\n";
}

std::string generation_config_json(const Config& c, int64_t endoftext) {
  json j;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = {c.eos_token_id, endoftext};
  j["pad_token_id"] = endoftext;
  j["transformers_version"] = "4.45.0.dev0";
  return j.dump(2) + "\n";
}

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

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
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
  if (opts.dtype != DType::kBF16 && opts.dtype != DType::kF32)
    throw InvalidArgument("make-tiny-model: dtype must be bf16 or f32, got " +
                          std::string(dtype_name(opts.dtype)));
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (!fs::is_directory(out_dir))
    throw FailedPrecondition(out_dir + ": cannot create directory: " + ec.message());
  const fs::path dir(out_dir);

  // Tokenizer first: its special-token ids go into config.json.
  std::string tok_text, tok_origin;
  if (!opts.tokenizer_path.empty()) {
    tok_text = io::read_text_file(opts.tokenizer_path);
    tok_origin = opts.tokenizer_path;
  } else {
    io::BpeTrainOptions bo;
    bo.vocab_size = opts.size == TinySize::kTiny ? 1000 : 8000;
    bo.special_tokens = special_tokens();
    if (opts.size == TinySize::k2BShape) bo.special_first_id = 151643;
    tok_text = io::train_byte_level_bpe(io::builtin_training_corpus(), bo);
    tok_origin = "trained tokenizer";
  }
  const TokenizerFacts tok = read_tokenizer_facts(tok_text, tok_origin);

  TinyResult res;
  Config& c = res.config;
  c = tiny_base_config(opts.size);
  if (opts.tied) c.text.tie_word_embeddings = *opts.tied;
  c.torch_dtype = opts.dtype == DType::kBF16 ? "bfloat16" : "float32";
  if (opts.size == TinySize::k2BShape) {
    if (tok.size > c.text.vocab_size)
      throw InvalidArgument(tok_origin + ": " + std::to_string(tok.size) +
                            " tokens do not fit the 2b-shape vocabulary of " +
                            std::to_string(c.text.vocab_size));
  } else {
    c.text.vocab_size = round_up(tok.size, 64);
  }
  const int64_t endoftext = special_id(tok, "<|endoftext|>", tok_origin);
  c.bos_token_id = endoftext;
  c.eos_token_id = special_id(tok, "<|im_end|>", tok_origin);
  c.vision_start_token_id = special_id(tok, "<|vision_start|>", tok_origin);
  c.vision_end_token_id = special_id(tok, "<|vision_end|>", tok_origin);
  c.vision_token_id = special_id(tok, "<|vision_pad|>", tok_origin);
  c.image_token_id = special_id(tok, "<|image_pad|>", tok_origin);
  c.video_token_id = special_id(tok, "<|video_pad|>", tok_origin);
  c.validate("make-tiny-model config");
  res.tokenizer_size = tok.size;

  write_file(dir / "config.json", config_to_json(c));
  write_file(dir / "tokenizer.json", tok_text);
  write_file(dir / "tokenizer_config.json", tokenizer_config_json(tok));
  write_file(dir / "generation_config.json", generation_config_json(c, endoftext));
  write_file(dir / "preprocessor_config.json", preprocessor_config_json(c));
  res.files = {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
               "preprocessor_config.json"};

  // Weights, produced while writing.
  const uint64_t base_key = splitmix64(opts.seed ^ 0x6D6D72742D746E79ull);
  std::vector<io::PendingTensor> pending;
  for (const ExpectedTensor& e : expected_tensors(c, c.text.tie_word_embeddings)) {
    Init init = Init::kNormal;
    if (is_norm_param(e.name)) {
      const bool is_bias = e.name.size() > 5 && e.name.compare(e.name.size() - 5, 5, ".bias") == 0;
      init = is_bias ? Init::kZeros : Init::kOnes;
    }
    const uint64_t key = splitmix64(base_key ^ fnv1a(e.name));
    const DType dt = opts.dtype;
    pending.push_back({tensor_name(opts.naming, e.name), dt, e.shape,
                       [dt, init, key](void* dst, int64_t b, int64_t en) {
                         fill_values(dst, b, en, dt, init, key, 0.02f);
                       }});
    res.n_params += shape_numel(e.shape);
  }
  res.n_tensors = pending.size();
  std::function<void(uint64_t, uint64_t)> progress;
  if (opts.progress) {
    progress = [](uint64_t done, uint64_t total) {
      std::fprintf(stderr, "\r[make-tiny-model] weights %8.1f / %.1f MB (%3.0f%%)", done / 1e6,
                   total / 1e6, total ? 100.0 * done / total : 100.0);
      if (done == total) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    };
  }
  std::vector<std::string> weight_files = io::write_checkpoint_streamed(
      out_dir, pending, opts.max_shard_bytes, {{"format", "pt"}}, opts.pool, progress);
  res.files.insert(res.files.end(), weight_files.begin(), weight_files.end());
  res.n_bytes = static_cast<uint64_t>(res.n_params) * dtype_size(opts.dtype);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace mmrt::models::qwen2_vl
