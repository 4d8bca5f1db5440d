// Qwen2-VL config.json parsing (original and text_config layouts), validation failures, tensor
// naming conventions, and the expected-tensor table against the published 2B parameter count.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "models/qwen2_vl/config.h"
#include "models/qwen2_vl/weights_spec.h"
#include "test_util.h"

namespace mmrt {
namespace {

using models::qwen2_vl::Config;
using models::qwen2_vl::Naming;
using nlohmann::json;
using testing::error_of;
using ::testing::HasSubstr;

// The original Qwen2-VL-2B-Instruct config.json layout (text fields at the top level).
const char* kOriginal2B = R"({
  "architectures": ["Qwen2VLForConditionalGeneration"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "vision_start_token_id": 151652,
  "vision_end_token_id": 151653,
  "vision_token_id": 151654,
  "image_token_id": 151655,
  "video_token_id": 151656,
  "hidden_act": "silu",
  "hidden_size": 1536,
  "initializer_range": 0.02,
  "intermediate_size": 8960,
  "max_position_embeddings": 32768,
  "max_window_layers": 28,
  "model_type": "qwen2_vl",
  "num_attention_heads": 12,
  "num_hidden_layers": 28,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.41.2",
  "use_cache": true,
  "use_sliding_window": false,
  "vision_config": {
    "depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
    "hidden_size": 1536, "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14,
    "temporal_patch_size": 2
  },
  "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
  "vocab_size": 151936
})";

// The newer transformers layout: text fields under "text_config", "dtype", rope_type default.
const char* kNewLayout = R"({
  "architectures": ["Qwen2VLForConditionalGeneration"],
  "model_type": "qwen2_vl",
  "dtype": "float32",
  "image_token_id": 1011,
  "video_token_id": 1012,
  "vision_start_token_id": 1008,
  "vision_end_token_id": 1009,
  "vision_token_id": 1010,
  "tie_word_embeddings": false,
  "text_config": {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "max_position_embeddings": 4096,
    "bos_token_id": 1000, "eos_token_id": [1002, 1000],
    "rope_scaling": {"rope_type": "default", "type": "default", "mrope_section": [2, 3, 3]}
  },
  "vision_config": {
    "depth": 2, "embed_dim": 32, "mlp_ratio": 4, "num_heads": 2, "in_channels": 3,
    "hidden_size": 64, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2
  }
})";

Config parse(const std::string& text) {
  return models::qwen2_vl::parse_config(text, "cfg/config.json");
}

// kOriginal2B with one field replaced (json pointer path) or removed (value null -> erase).
std::string edit(const char* base, const std::string& ptr, const json& value, bool erase = false) {
  json j = json::parse(base);
  if (erase)
    j[json::json_pointer(ptr).parent_pointer()].erase(json::json_pointer(ptr).back());
  else
    j[json::json_pointer(ptr)] = value;
  return j.dump();
}

TEST(HfConfig, ParsesOriginalLayout) {
  Config c = parse(kOriginal2B);
  EXPECT_EQ(c.architecture, "Qwen2VLForConditionalGeneration");
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.text.hidden_size, 1536);
  EXPECT_EQ(c.text.intermediate_size, 8960);
  EXPECT_EQ(c.text.num_hidden_layers, 28);
  EXPECT_EQ(c.text.num_attention_heads, 12);
  EXPECT_EQ(c.text.num_key_value_heads, 2);
  EXPECT_EQ(c.text.head_dim(), 128);
  EXPECT_EQ(c.text.vocab_size, 151936);
  EXPECT_TRUE(c.text.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.text.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.text.rope_theta, 1e6);
  EXPECT_EQ(c.text.mrope_section, (std::vector<int64_t>{16, 24, 24}));
  EXPECT_EQ(c.vision.depth, 32);
  EXPECT_EQ(c.vision.embed_dim, 1280);
  EXPECT_EQ(c.vision.head_dim(), 80);
  EXPECT_EQ(c.vision.mlp_hidden(), 5120);
  EXPECT_EQ(c.vision.hidden_size, 1536);
  EXPECT_EQ(c.vision.hidden_act, "quick_gelu");
  EXPECT_EQ(c.text.bos_token_id, 151643);
  EXPECT_EQ(c.text.eos_token_id, 151645);
  EXPECT_EQ(c.vision_start_token_id, 151652);
  EXPECT_EQ(c.image_token_id, 151655);
  EXPECT_EQ(c.video_token_id, 151656);
  c.validate("cfg/config.json");
}

TEST(HfConfig, ParsesTextConfigLayout) {
  Config c = parse(kNewLayout);
  EXPECT_EQ(c.torch_dtype, "float32");
  EXPECT_EQ(c.text.hidden_size, 64);
  EXPECT_EQ(c.text.num_attention_heads, 4);
  EXPECT_EQ(c.text.vocab_size, 1024);
  EXPECT_EQ(c.text.max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.text.rope_theta, 1e4);
  EXPECT_FALSE(c.text.tie_word_embeddings);
  EXPECT_EQ(c.text.mrope_section, (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(c.text.bos_token_id, 1000);
  EXPECT_EQ(c.text.eos_token_id, 1002);  // first of the list
  EXPECT_EQ(c.image_token_id, 1011);
  EXPECT_EQ(c.vision.in_chans, 3);  // from "in_channels"
  EXPECT_EQ(c.vision.embed_dim, 32);
  c.validate("cfg/config.json");
}

TEST(HfConfig, RopeParametersAndMissingRope) {
  Config c = parse(edit(kOriginal2B, "/rope_scaling", nullptr, true));
  EXPECT_TRUE(c.text.mrope_section.empty());
  std::string with_params =
      edit(edit(kOriginal2B, "/rope_scaling", nullptr, true).c_str(), "/rope_parameters",
           json{{"rope_type", "default"}, {"rope_theta", 5e5}, {"mrope_section", {16, 24, 24}}});
  c = parse(with_params);
  EXPECT_DOUBLE_EQ(c.text.rope_theta, 5e5);
  EXPECT_EQ(c.text.mrope_section, (std::vector<int64_t>{16, 24, 24}));
}

TEST(HfConfig, WriterRoundTrips) {
  Config c = parse(kNewLayout);
  std::string text = models::qwen2_vl::config_to_json(c);
  json j = json::parse(text);
  EXPECT_EQ(j["hidden_size"], 64);  // original layout: text fields at the top level
  EXPECT_EQ(j["rope_scaling"]["type"], "mrope");
  EXPECT_EQ(j["vision_config"]["embed_dim"], 32);
  Config d = parse(text);
  EXPECT_EQ(models::qwen2_vl::config_to_json(d), text);
  EXPECT_EQ(d.text.mrope_section, c.text.mrope_section);
  EXPECT_EQ(d.text.eos_token_id, c.text.eos_token_id);
  EXPECT_EQ(d.torch_dtype, "float32");
  EXPECT_DOUBLE_EQ(d.text.rms_norm_eps, c.text.rms_norm_eps);
}

TEST(HfConfig, ParseErrorsNameTheField) {
  auto err = [](const std::string& text) { return error_of<FormatError>([&] { parse(text); }); };
  EXPECT_THAT(err("{ nope"), HasSubstr("cfg/config.json: not valid JSON"));
  EXPECT_THAT(err(edit(kOriginal2B, "/hidden_size", nullptr, true)),
              HasSubstr("missing required field \"hidden_size\""));
  EXPECT_THAT(err(edit(kOriginal2B, "/num_attention_heads", "12")),
              HasSubstr("field \"num_attention_heads\" must be an integer"));
  EXPECT_THAT(err(edit(kOriginal2B, "/architectures", {"Qwen2_5_VLForConditionalGeneration"})),
              HasSubstr("unsupported architecture \"Qwen2_5_VLForConditionalGeneration\""));
  EXPECT_THAT(err(edit(kOriginal2B, "/vision_config", nullptr, true)),
              HasSubstr("missing \"vision_config\""));
  EXPECT_THAT(err(edit(kOriginal2B, "/vision_config/depth", nullptr, true)),
              HasSubstr("missing required field \"vision_config.depth\""));
  EXPECT_THAT(err(edit(kOriginal2B, "/rope_scaling/type", "yarn")),
              HasSubstr("unsupported rope type \"yarn\""));
  EXPECT_THAT(err(edit(kNewLayout, "/text_config/vocab_size", 3.5)),
              HasSubstr("field \"text_config.vocab_size\" must be an integer"));
  EXPECT_THAT(err(edit(kOriginal2B, "/tie_word_embeddings", 1)),
              HasSubstr("field \"tie_word_embeddings\" must be true or false"));
}

TEST(HfConfig, ValidationFailures) {
  auto invalid = [](const std::string& text) {
    return error_of<FormatError>([&] { parse(text).validate("cfg/config.json"); });
  };
  EXPECT_THAT(invalid(edit(kOriginal2B, "/num_attention_heads", 7)),
              HasSubstr("cfg/config.json: hidden_size 1536 is not divisible by "
                        "num_attention_heads 7"));
  EXPECT_THAT(invalid(edit(kOriginal2B, "/num_key_value_heads", 5)),
              HasSubstr("num_attention_heads 12 is not a multiple of num_key_value_heads 5"));
  EXPECT_THAT(invalid(edit(kOriginal2B, "/rope_scaling/mrope_section", {16, 24, 25})),
              HasSubstr("mrope_section sums to 65 but head_dim/2 is 64"));
  EXPECT_THAT(
      invalid(edit(kOriginal2B, "/vision_config/num_heads", 6)),
      HasSubstr("vision_config.embed_dim 1280 is not divisible by vision_config.num_heads 6"));
}

TEST(HfConfig, MoreValidationFailures) {
  auto invalid = [](const std::string& text) {
    return error_of<FormatError>([&] { parse(text).validate("cfg/config.json"); });
  };
  EXPECT_THAT(
      invalid(edit(kOriginal2B, "/vision_config/num_heads", 128)),
      HasSubstr("vision_config.embed_dim gives vision head_dim 10; head_dim/2 must be even"));
  EXPECT_THAT(invalid(edit(kOriginal2B, "/vision_config/hidden_size", 1024)),
              HasSubstr("vision_config.hidden_size 1024 (merger output) differs from text "
                        "hidden_size 1536"));
  EXPECT_THAT(invalid(edit(kOriginal2B, "/image_token_id", 151936)),
              HasSubstr("image_token_id 151936 is outside the vocabulary [0, 151936)"));
  EXPECT_THAT(invalid(edit(kOriginal2B, "/num_hidden_layers", 0)),
              HasSubstr("num_hidden_layers must be positive, got 0"));
  // An activation the runtime lacks is unimplemented, not a malformed file.
  EXPECT_THAT(error_of<Unimplemented>(
                  [&] { parse(edit(kOriginal2B, "/hidden_act", "gelu")).validate("cfg/config.json"); }),
              HasSubstr("hidden_act is \"gelu\"; only \"silu\" is supported"));
}

TEST(HfConfig, TensorNaming) {
  using models::qwen2_vl::tensor_name;
  EXPECT_EQ(tensor_name(Naming::kOld, "model.norm.weight"), "model.norm.weight");
  EXPECT_EQ(tensor_name(Naming::kNew, "model.layers.3.mlp.up_proj.weight"),
            "model.language_model.layers.3.mlp.up_proj.weight");
  EXPECT_EQ(tensor_name(Naming::kNew, "visual.blocks.0.attn.qkv.bias"),
            "model.visual.blocks.0.attn.qkv.bias");
  EXPECT_EQ(tensor_name(Naming::kNew, "lm_head.weight"), "lm_head.weight");
  EXPECT_THROW(tensor_name(Naming::kNew, "encoder.x"), InvalidArgument);

  using models::qwen2_vl::detect_naming;
  EXPECT_EQ(detect_naming(
                {"lm_head.weight", "model.embed_tokens.weight", "visual.merger.ln_q.weight"}, "d"),
            Naming::kOld);
  EXPECT_EQ(detect_naming({"lm_head.weight", "model.language_model.norm.weight",
                           "model.visual.merger.ln_q.weight"},
                          "d"),
            Naming::kNew);
  EXPECT_THAT(error_of<FormatError>([] {
                detect_naming({"model.language_model.norm.weight", "visual.x"}, "d");
              }),
              HasSubstr("mixes old-style tensor names ('visual.x')"));
  EXPECT_THAT(error_of<FormatError>([] { detect_naming({"encoder.w"}, "d"); }),
              HasSubstr("d: no Qwen2-VL tensor names found"));
}

int64_t count_params(const std::vector<models::ExpectedTensor>& ts, const std::string& prefix) {
  int64_t n = 0;
  for (const auto& t : ts)
    if (t.name.rfind(prefix, 0) == 0) n += shape_numel(t.shape);
  return n;
}

// The published 2B index.json reports total_size 4,417,971,200 bytes of bf16 = 2,208,985,600
// parameters: 1,543,714,304 in the tied LLM and 665,271,296 in the vision tower.
TEST(WeightsSpec, MatchesThePublished2BParameterCount) {
  Config c = parse(kOriginal2B);
  auto ts = models::qwen2_vl::expected_tensors(c, /*tied=*/true);
  EXPECT_EQ(count_params(ts, ""), 2'208'985'600);
  EXPECT_EQ(count_params(ts, "model."), 1'543'714'304);
  EXPECT_EQ(count_params(ts, "visual."), 665'271'296);
  EXPECT_EQ(ts.size(), 1u + 28 * 12 + 1 + 1 + 32 * 12 + 6);
  auto untied = models::qwen2_vl::expected_tensors(c, /*tied=*/false);
  EXPECT_EQ(count_params(untied, "lm_head.weight"), 151936LL * 1536);
}

TEST(WeightsSpec, ShapesOfRepresentativeTensors) {
  Config c = parse(kOriginal2B);
  std::map<std::string, Shape> m;
  for (const auto& t : models::qwen2_vl::expected_tensors(c, true)) m[t.name] = t.shape;
  EXPECT_EQ(m.at("model.embed_tokens.weight"), (Shape{151936, 1536}));
  EXPECT_EQ(m.at("model.layers.27.self_attn.k_proj.weight"), (Shape{256, 1536}));
  EXPECT_EQ(m.at("model.layers.0.self_attn.v_proj.bias"), (Shape{256}));
  EXPECT_EQ(m.at("model.layers.0.mlp.down_proj.weight"), (Shape{1536, 8960}));
  EXPECT_EQ(m.at("visual.patch_embed.proj.weight"), (Shape{1280, 3, 2, 14, 14}));
  EXPECT_EQ(m.at("visual.blocks.31.attn.qkv.weight"), (Shape{3840, 1280}));
  EXPECT_EQ(m.at("visual.blocks.0.mlp.fc2.weight"), (Shape{1280, 5120}));
  EXPECT_EQ(m.at("visual.merger.mlp.0.weight"), (Shape{5120, 5120}));
  EXPECT_EQ(m.at("visual.merger.mlp.2.weight"), (Shape{1536, 5120}));
  EXPECT_EQ(m.count("lm_head.weight"), 0u);
  EXPECT_EQ(m.count("model.layers.0.self_attn.o_proj.bias"), 0u);
  EXPECT_TRUE(models::qwen2_vl::is_norm_param("visual.merger.ln_q.bias"));
  EXPECT_TRUE(models::qwen2_vl::is_norm_param("model.layers.0.post_attention_layernorm.weight"));
  EXPECT_FALSE(models::qwen2_vl::is_norm_param("model.layers.0.mlp.up_proj.weight"));
}

}  // namespace
}  // namespace mmrt
