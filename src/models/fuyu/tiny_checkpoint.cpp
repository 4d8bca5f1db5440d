// Random Fuyu checkpoints in the exact Hugging Face folder layout.
#include "models/fuyu/tiny_checkpoint.h"

#include <nlohmann/json.hpp>

#include <optional>

#include "core/error.h"
#include "io/tokenizer.h"
#include "models/fuyu/processor.h"
#include "models/tiny_common.h"

namespace mmrt::models::fuyu {

using nlohmann::ordered_json;

namespace {

std::string preprocessor_config_json(const Config& c) {
  ordered_json j;
  j["do_normalize"] = true;
  j["do_pad"] = true;
  j["do_rescale"] = true;
  j["do_resize"] = true;
  j["image_mean"] = 0.5;
  j["image_processor_type"] = "FuyuImageProcessor";
  j["image_std"] = 0.5;
  j["padding_mode"] = "constant";
  j["padding_value"] = 1.0;
  j["patch_size"] = {{"height", c.patch_size}, {"width", c.patch_size}};
  j["processor_class"] = "FuyuProcessor";
  j["resample"] = 2;
  j["rescale_factor"] = 0.00392156862745098;
  j["size"] = {{"height", 1080}, {"width", 1920}};
  return j.dump(2) + "\n";
}

std::string tokenizer_config_json(const tiny::TokenizerFacts& facts, int64_t max_length) {
  ordered_json j;
  j["add_bos_token"] = true;
  j["add_eos_token"] = false;
  j["added_tokens_decoder"] = tiny::added_tokens_decoder<ordered_json>(facts);
  j["bos_token"] = "<s>";
  j["clean_up_tokenization_spaces"] = false;
  j["eos_token"] = "|ENDOFTEXT|";
  j["legacy"] = true;
  j["model_max_length"] = max_length;
  j["processor_class"] = "FuyuProcessor";
  j["tokenizer_class"] = "LlamaTokenizer";
  j["unk_token"] = "<unk>";
  return j.dump(2) + "\n";
}

}  // namespace

TinySize parse_tiny_size(const std::string& s) {
  if (s == "tiny") return TinySize::kTiny;
  if (s == "8b-shape-4l") return TinySize::k8bShape4Layers;
  throw InvalidArgument("unknown model size '" + s + "' (expected tiny or 8b-shape-4l)");
}

const char* tiny_size_name(TinySize s) {
  return s == TinySize::kTiny ? "tiny" : "8b-shape-4l";
}

Config tiny_base_config(TinySize size) {
  Config c;  // the defaults are Fuyu-8B's
  TextConfig& t = c.text;
  if (size == TinySize::kTiny) {
    t.hidden_size = 64;
    t.num_hidden_layers = 2;
    t.num_attention_heads = 4;
    t.intermediate_size = 128;
    // Fuyu-8B's 16384; the tiny model takes the long prompts the server tests send (its
    // 1,000-token vocabulary splits them into many pieces).
    t.max_position_embeddings = 32768;
  } else {
    t.num_hidden_layers = 4;
  }
  c.hidden_size = t.hidden_size;
  return c;
}

TinyModelResult make_tiny_checkpoint(const std::string& out_dir, const TinyModelOptions& o) {
  const double t0 = tiny::clock_seconds();
  tiny::check_dtype(o.dtype);
  const TinySize size = parse_tiny_size(o.size);
  Naming naming = Naming::kOld;
  if (o.naming == "new")
    naming = Naming::kNew;
  else if (!o.naming.empty() && o.naming != "old")
    throw InvalidArgument("fuyu: --naming must be old or new, got '" + o.naming + "'");
  const auto dir = tiny::create_output_dir(out_dir);
  tiny::TokenizerOptions to;
  to.path = o.tokenizer_path;
  to.vocab_size = 1000;
  // adept/fuyu-8b's layout: a Unigram vocabulary in which |SPEAKER|, |NEWLINE| and |ENDOFTEXT|
  // are pieces scored 0, |ENDOFTEXT| also an added token and the post-processor's prefix.
  to.specials = {"|SPEAKER|", "|NEWLINE|", "|ENDOFTEXT|"};
  to.unigram_added = {"|ENDOFTEXT|"};
  to.unigram_prefix = "|ENDOFTEXT|";
  to.style = tiny::TokenizerOptions::Style::kUnigram;
  tiny::Tokenizer tok = tiny::make_tokenizer(to);
  Config c = tiny_base_config(size);
  if (o.tied) c.text.tie_word_embeddings = *o.tied;
  c.torch_dtype = o.dtype == DType::kBF16 ? "bfloat16" : "float32";
  if (size == TinySize::kTiny) c.text.vocab_size = tiny::round_up(tok.facts.size, 64);
  if (tok.facts.size > c.text.vocab_size)
    throw InvalidArgument(tok.origin + ": " + std::to_string(tok.facts.size) +
                          " tokens do not fit the vocabulary of " +
                          std::to_string(c.text.vocab_size));
  if (o.tokenizer_path.empty())
    tiny::fill_unassigned_ids(tok, static_cast<int32_t>(c.text.vocab_size));
  // The ids as the loader finds them: pieces of the vocabulary (Fuyu's are not added tokens).
  const io::Tokenizer t = io::Tokenizer::from_json(tok.text, tok.origin);
  const TokenIds ids = prompt_token_ids(t, tok.origin);
  c.image_token_id = ids.speaker;
  c.text.bos_token_id = ids.bos;
  const std::optional<int32_t> eos = t.piece_to_id("</s>");
  if (!eos) throw FormatError(tok.origin + ": has no \"</s>\" token, which Fuyu ends answers with");
  c.text.eos_token_id = *eos;
  c.validate("make-tiny-model config");

  // Fuyu's answers end with |ENDOFTEXT| (the tokenizer's end of text) or </s>.
  ordered_json gen;
  gen["_from_model_config"] = true;
  gen["bos_token_id"] = c.text.bos_token_id;
  const std::optional<int32_t> eot = t.piece_to_id("|ENDOFTEXT|");
  gen["eos_token_id"] =
      eot ? ordered_json{*eot, c.text.eos_token_id} : ordered_json(c.text.eos_token_id);
  gen["transformers_version"] = "4.45.0";
  tiny::write_file(dir / "config.json", config_to_json(c));
  tiny::write_file(dir / "generation_config.json", gen.dump(2) + "\n");
  tiny::write_file(dir / "preprocessor_config.json", preprocessor_config_json(c));
  tiny::write_file(dir / "tokenizer.json", tok.text);
  tiny::write_file(dir / "tokenizer_config.json",
                   tokenizer_config_json(tok.facts, c.text.max_position_embeddings));
  std::vector<tiny::TensorSpec> tensors;
  for (const ExpectedTensor& e : expected_tensors(c, c.text.tie_word_embeddings))
    tensors.push_back({e.name, tensor_name(naming, e.name), e.shape, is_norm_param(e.name)});
  const tiny::WrittenWeights w = tiny::write_random_weights(
      out_dir, tensors, {o.seed, o.dtype, o.max_shard_bytes, o.pool, o.progress});
  TinyModelResult r =
      tiny::report({"config.json", "generation_config.json", "preprocessor_config.json",
                    "tokenizer.json", "tokenizer_config.json"},
                   w, tok.facts.size, c.text.vocab_size, t0);
  r.summary = std::string("fuyu, ") + tiny_size_name(size) +
              (size == TinySize::k8bShape4Layers ? " (Fuyu-8B's shapes, 4 of its 36 layers)" : "") +
              ", " + (o.dtype == DType::kBF16 ? "bf16" : "f32") + ", " +
              (naming == Naming::kOld ? "old" : "new") + " names, " +
              (c.text.tie_word_embeddings ? "tied" : "untied") + " lm_head";
  return r;
}

}  // namespace mmrt::models::fuyu
