// Random LLaVA checkpoints in the exact Hugging Face folder layout.
#include "models/llava/tiny_checkpoint.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/llava/chat_template.h"
#include "models/llava/weights_spec.h"
#include "models/tiny_common.h"

namespace mmrt::models::llava {

using nlohmann::ordered_json;

namespace {

constexpr int32_t kImageTokenId = 32000;  // <image>, then <pad>: llava-hf's ids

std::string preprocessor_config_json(const Config& c) {
  const int64_t S = c.vision.image_size;
  ordered_json j;
  j["crop_size"] = {{"height", S}, {"width", S}};
  j["do_center_crop"] = true;
  j["do_convert_rgb"] = true;
  j["do_normalize"] = true;
  if (c.next) j["do_pad"] = true;
  j["do_rescale"] = true;
  j["do_resize"] = true;
  if (c.next) {
    ordered_json pins = ordered_json::array();
    for (const Resolution& p : c.image_grid_pinpoints) pins.push_back({p.height, p.width});
    j["image_grid_pinpoints"] = pins;
  }
  j["image_mean"] = {0.48145466, 0.4578275, 0.40821073};
  j["image_processor_type"] = c.next ? "LlavaNextImageProcessor" : "CLIPImageProcessor";
  j["image_std"] = {0.26862954, 0.26130258, 0.27577711};
  j["processor_class"] = c.next ? "LlavaNextProcessor" : "LlavaProcessor";
  j["resample"] = 3;
  j["rescale_factor"] = 0.00392156862745098;
  j["size"] = {{"shortest_edge", S}};
  return j.dump(2) + "\n";
}

std::string processor_config_json(const Config& c) {
  ordered_json j;
  j["image_token"] = "<image>";
  j["num_additional_image_tokens"] = 1;
  j["patch_size"] = c.vision.patch_size;
  j["processor_class"] = c.next ? "LlavaNextProcessor" : "LlavaProcessor";
  j["vision_feature_select_strategy"] = c.vision_feature_select_strategy;
  return j.dump(2) + "\n";
}

// tokenizer_config.json of a Llama tokenizer (LlamaTokenizerFast): BOS added, no EOS.
std::string tokenizer_config_json(const tiny::TokenizerFacts& facts, ChatFormat format) {
  ordered_json j;
  j["add_bos_token"] = true;
  j["add_eos_token"] = false;
  j["added_tokens_decoder"] = tiny::added_tokens_decoder<ordered_json>(facts);
  j["bos_token"] = "<s>";
  j["chat_template"] = chat_template_jinja(format);
  j["clean_up_tokenization_spaces"] = false;
  j["eos_token"] = "</s>";
  j["legacy"] = true;
  j["model_max_length"] = 32768;
  j["pad_token"] = "<pad>";
  j["padding_side"] = "left";
  j["processor_class"] = "LlavaNextProcessor";
  j["sp_model_kwargs"] = ordered_json::object();
  j["tokenizer_class"] = "LlamaTokenizer";
  j["unk_token"] = "<unk>";
  j["use_default_system_prompt"] = false;
  return j.dump(2) + "\n";
}

std::string generation_config_json(const Config& c) {
  ordered_json j;
  j["_from_model_config"] = true;
  j["bos_token_id"] = c.text.bos_token_id;
  j["eos_token_id"] = c.text.eos_token_id;
  if (c.pad_token_id >= 0) j["pad_token_id"] = c.pad_token_id;
  j["transformers_version"] = "4.45.0";
  return j.dump(2) + "\n";
}

}  // namespace

TinySize parse_tiny_size(const std::string& s) {
  if (s == "tiny") return TinySize::kTiny;
  if (s == "7b-shape-4l") return TinySize::k7bShape4Layers;
  throw InvalidArgument("unknown model size '" + s + "' (expected tiny or 7b-shape-4l)");
}

const char* tiny_size_name(TinySize s) {
  return s == TinySize::kTiny ? "tiny" : "7b-shape-4l";
}

Config tiny_base_config(TinySize size, bool next) {
  Config c;  // the defaults are LLaVA's CLIP ViT-L/14-336
  c.next = next;
  c.architecture = next ? "LlavaNextForConditionalGeneration" : "LlavaForConditionalGeneration";
  c.model_type = next ? "llava_next" : "llava";
  TextConfig& t = c.text;
  t.model_type = next ? "mistral" : "llama";
  t.vocab_size = 32064;
  t.rms_norm_eps = 1e-5;
  if (next) {
    t.intermediate_size = 14336;
    t.num_key_value_heads = 8;
    t.rope_theta = 1e6;
    t.max_position_embeddings = 32768;
    t.sliding_window = 0;
  } else {
    // LLaVA-1.5-7B's 4096; the tiny model takes the long prompts the server tests send.
    t.max_position_embeddings = size == TinySize::kTiny ? 32768 : 4096;
  }
  VisionConfig& v = c.vision;
  if (size == TinySize::kTiny) {
    t.hidden_size = 64;
    t.num_hidden_layers = 2;
    t.num_attention_heads = 4;
    t.num_key_value_heads = next ? 2 : 4;
    t.intermediate_size = 128;
    v.hidden_size = 32;
    v.intermediate_size = 64;
    v.num_hidden_layers = 3;
    v.num_attention_heads = 2;
    v.image_size = 112;
  } else {
    t.num_hidden_layers = 4;
  }
  if (next)
    for (Resolution r :
         std::vector<Resolution>{{336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}})
      c.image_grid_pinpoints.push_back(
          {r.height / 336 * v.image_size, r.width / 336 * v.image_size});
  c.image_seq_length = v.side() * v.side();
  c.pad_token_id = kImageTokenId + 1;
  return c;
}

TinyModelResult make_tiny_checkpoint(const std::string& out_dir, const TinyModelOptions& o,
                                     bool next) {
  const double t0 = tiny::clock_seconds();
  tiny::check_dtype(o.dtype);
  const TinySize size = parse_tiny_size(o.size);
  Naming naming = Naming::kOld;
  if (o.naming == "new")
    naming = Naming::kNew;
  else if (!o.naming.empty() && o.naming != "old")
    throw InvalidArgument("llava: --naming must be old or new, got '" + o.naming + "'");
  const auto dir = tiny::create_output_dir(out_dir);
  const char* family = next ? "LLaVA-NeXT" : "LLaVA";
  tiny::TokenizerOptions to;
  to.path = o.tokenizer_path;
  to.vocab_size = 1000;
  to.specials = {"<image>", "<pad>"};
  to.special_first_id = kImageTokenId;
  to.style = tiny::TokenizerOptions::Style::kSentencePiece;
  tiny::Tokenizer tok = tiny::make_tokenizer(to);
  Config c = tiny_base_config(size, next);
  if (o.tied) c.text.tie_word_embeddings = *o.tied;
  c.torch_dtype = o.dtype == DType::kBF16 ? "bfloat16" : "float32";
  if (tok.facts.size > c.text.vocab_size) c.text.vocab_size = tiny::round_up(tok.facts.size, 64);
  if (o.tokenizer_path.empty())
    tiny::fill_unassigned_ids(tok, static_cast<int32_t>(c.text.vocab_size));
  c.image_token_index = tiny::special_id(tok, "<image>", family);
  c.pad_token_id = tok.facts.added_ids.count("<pad>") ? tok.facts.added_ids.at("<pad>") : -1;
  c.text.bos_token_id = tiny::special_id(tok, "<s>", family);
  c.text.eos_token_id = tiny::special_id(tok, "</s>", family);
  c.validate("make-tiny-model config");
  const ChatFormat format = next ? ChatFormat::kMistral : ChatFormat::kVicuna;

  tiny::write_file(dir / "config.json", config_to_json(c));
  tiny::write_file(dir / "generation_config.json", generation_config_json(c));
  tiny::write_file(dir / "preprocessor_config.json", preprocessor_config_json(c));
  tiny::write_file(dir / "processor_config.json", processor_config_json(c));
  tiny::write_file(dir / "tokenizer.json", tok.text);
  tiny::write_file(dir / "tokenizer_config.json", tokenizer_config_json(tok.facts, format));
  std::vector<tiny::TensorSpec> tensors;
  for (const ExpectedTensor& e : expected_tensors(c, c.text.tie_word_embeddings))
    tensors.push_back({e.name, tensor_name(naming, e.name), e.shape, is_norm_param(e.name)});
  const tiny::WrittenWeights w = tiny::write_random_weights(
      out_dir, tensors, {o.seed, o.dtype, o.max_shard_bytes, o.pool, o.progress});
  TinyModelResult r =
      tiny::report({"config.json", "generation_config.json", "preprocessor_config.json",
                    "processor_config.json", "tokenizer.json", "tokenizer_config.json"},
                   w, tok.facts.size, c.text.vocab_size, t0);
  r.summary =
      std::string(next ? "llava-next" : "llava") + ", " + tiny_size_name(size) +
      (size == TinySize::k7bShape4Layers ? " (the 7B's shapes, 4 of its 32 decoder layers)" : "") +
      ", " + (o.dtype == DType::kBF16 ? "bf16" : "f32") + ", " +
      (naming == Naming::kOld ? "old" : "new") + " names, " +
      (c.text.tie_word_embeddings ? "tied" : "untied") + " lm_head";
  return r;
}

}  // namespace mmrt::models::llava
