#include "models/qwen2_5_vl/tiny_checkpoint.h"

#include "core/error.h"
#include "models/qwen2_5_vl/weights_spec.h"
#include "models/qwen2_vl/tiny_checkpoint.h"

namespace mmrt::models::qwen2_5_vl {

Config tiny_base_config(const std::string& size) {
  Config c;
  qwen2_vl::TextConfig& t = c.qwen2.text;
  VisionConfig& v = c.vision;
  c.qwen2.architecture = kArchitecture;
  c.qwen2.model_type = kModelType;
  t.rope_theta = 1e6;
  t.rms_norm_eps = 1e-6;
  t.max_position_embeddings = 32768;
  v.tokens_per_second = 2;  // the released checkpoints' value
  t.vocab_size = 0;         // the tokenizer's (rounded up); the 3b shape takes the real one
  if (size == "tiny") {
    t.hidden_size = 64;
    t.num_hidden_layers = 2;
    t.num_attention_heads = 4;
    t.num_key_value_heads = 2;
    t.intermediate_size = 128;
    t.mrope_section = {2, 3, 3};
    t.tie_word_embeddings = false;
    v.depth = 4;
    v.hidden_size = 32;
    v.num_heads = 2;
    v.intermediate_size = 64;
    v.fullatt_block_indexes = {1, 3};
  } else if (size == "small") {
    t.hidden_size = 768;
    t.num_hidden_layers = 12;
    t.num_attention_heads = 12;
    t.num_key_value_heads = 2;
    t.intermediate_size = 2048;
    t.mrope_section = {8, 12, 12};
    t.tie_word_embeddings = true;
    v.depth = 8;
    v.hidden_size = 384;
    v.num_heads = 6;
    v.intermediate_size = 1024;
    v.fullatt_block_indexes = {3, 7};
  } else if (size == "3b-shape-4l") {
    t.hidden_size = 2048;
    t.num_hidden_layers = 4;
    t.num_attention_heads = 16;
    t.num_key_value_heads = 2;
    t.intermediate_size = 11008;
    t.vocab_size = 151936;
    t.mrope_section = {16, 24, 24};
    t.tie_word_embeddings = true;
    t.max_position_embeddings = 128000;
    v.depth = 32;
    v.hidden_size = 1280;
    v.num_heads = 16;
    v.intermediate_size = 3420;
    v.fullatt_block_indexes = {7, 15, 23, 31};
  } else {
    throw InvalidArgument("unknown model size '" + size +
                          "' (expected tiny, small or 3b-shape-4l)");
  }
  v.out_hidden_size = t.hidden_size;
  qwen2_vl::VisionConfig& g = c.qwen2.vision;  // the processor's view
  g.depth = v.depth;
  g.embed_dim = v.hidden_size;
  g.num_heads = v.num_heads;
  g.hidden_size = v.out_hidden_size;
  g.hidden_act = v.hidden_act;
  return c;
}

TinyModelResult make_tiny_model(const std::string& dir, const TinyModelOptions& o) {
  TinyModelOptions opts = o;
  if (opts.size.empty()) opts.size = "tiny";
  const Config base = tiny_base_config(opts.size);
  // The vision config rides along with the Qwen2-VL config the writer fills in.
  qwen2_vl::TinyOptions::Family family{.base = base.qwen2,
                                       .config_json =
                                           [base](const qwen2_vl::Config& filled) {
                                             Config c = base;
                                             c.qwen2 = filled;
                                             c.validate("make-tiny-model config");
                                             return config_to_json(c);
                                           },
                                       .tensors =
                                           [base](const qwen2_vl::Config& filled, bool tied) {
                                             Config c = base;
                                             c.qwen2 = filled;
                                             return expected_tensors(c, tied);
                                           }};
  return qwen2_vl::make_tiny_model(dir, opts, std::move(family), "qwen2.5-vl");
}

}  // namespace mmrt::models::qwen2_5_vl
