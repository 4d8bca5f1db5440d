// LLaVA-NeXT / LLaVA-1.5 without a reference process (also under ASan + UBSan): config.json
// defaults per HF class and validation, both tensor namings, make-tiny-model checkpoints loading
// and inspecting through the registry, the context cut at a sliding window, pack_image_features
// against a direct transcription of HF's view/permute/unpad/newline steps, the processor's
// expansion and its errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/llava/config.h"
#include "models/llava/packing.h"
#include "models/llava/processor.h"
#include "models/registry.h"
#include "models/tiny_registry.h"
#include "test_model.h"

namespace fs = std::filesystem;
using namespace mmrt;
using namespace mmrt::models;
using json = nlohmann::json;

namespace {

llava::Config parse(const json& j) {
  return llava::parse_config(j.dump(), "config.json");
}

class LlavaTiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("mmrt_llava_unit_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    for (const char* arch : {"llava-next", "llava"}) {
      TinyModelOptions o;
      o.dtype = DType::kF32;
      o.seed = 3;
      make_tiny_model(family_named(arch), (dir_ / arch).string(), o);
      o.naming = "new";
      make_tiny_model(family_named(arch), (dir_ / (std::string(arch) + "-new")).string(), o);
    }
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string model(const std::string& name) { return (dir_ / name).string(); }
  static fs::path dir_;
};
fs::path LlavaTiny::dir_;

}  // namespace

TEST(LlavaConfig, DefaultsAreTheHfClassDefaults) {
  // A Mistral text_config that states only its type: MistralConfig's defaults, sliding window
  // included; no vision_config: LLaVA's CLIP ViT-L/14-336.
  llava::Config c = parse({{"architectures", {"LlavaNextForConditionalGeneration"}},
                           {"text_config", {{"model_type", "mistral"}}}});
  EXPECT_TRUE(c.next);
  EXPECT_EQ(c.text.intermediate_size, 14336);
  EXPECT_EQ(c.text.num_key_value_heads, 8);
  EXPECT_EQ(c.text.sliding_window, 4096);
  EXPECT_EQ(c.text.max_position_embeddings, 131072);
  EXPECT_EQ(c.text.rope_theta, 10000.0);
  EXPECT_EQ(c.vision.hidden_size, 1024);
  EXPECT_EQ(c.vision.image_size, 336);
  EXPECT_EQ(c.vision.patch_size, 14);
  EXPECT_EQ(c.vision_layers_used(), 23);
  ASSERT_EQ(c.image_grid_pinpoints.size(), 5u);
  EXPECT_EQ(c.image_grid_pinpoints[3], (llava::Resolution{1008, 336}));
  // MistralConfig's 32000-token vocabulary has no room for <image> at 32000.
  EXPECT_THROW(c.validate("config.json"), FormatError);
  c.text.vocab_size = 32064;
  EXPECT_NO_THROW(c.validate("config.json"));
  // A Llama text_config: key/value heads default to the attention heads; a vision_config object
  // starts from CLIPVisionConfig's own defaults (ViT-B/32 at 224), not LLaVA's.
  c = parse({{"model_type", "llava"},
             {"text_config", {{"num_attention_heads", 8}, {"hidden_size", 512}}},
             {"vision_config", json::object()}});
  EXPECT_FALSE(c.next);
  EXPECT_EQ(c.text.model_type, "llama");
  EXPECT_EQ(c.text.num_key_value_heads, 8);
  EXPECT_EQ(c.text.intermediate_size, 11008);
  EXPECT_EQ(c.text.sliding_window, 0);
  EXPECT_EQ(c.vision.hidden_size, 768);
  EXPECT_EQ(c.vision.image_size, 224);
  EXPECT_EQ(c.vision.patch_size, 32);
  EXPECT_TRUE(c.image_grid_pinpoints.empty());
  // A null sliding window is none.
  c = parse({{"architectures", {"LlavaNextForConditionalGeneration"}},
             {"text_config", {{"model_type", "mistral"}, {"sliding_window", nullptr}}}});
  EXPECT_EQ(c.text.sliding_window, 0);
}

TEST(LlavaConfig, RefusesWhatItCannotRun) {
  const json base = {{"architectures", {"LlavaNextForConditionalGeneration"}},
                     {"text_config", {{"model_type", "mistral"}}}};
  auto with = [&](const std::string& key, const json& v) {
    json j = base;
    j[key] = v;
    return j;
  };
  EXPECT_THROW(parse(with("architectures", {"FuyuForCausalLM"})), FormatError);
  EXPECT_THROW(parse(with("vision_feature_layer", {-2, -5})), Unimplemented);
  EXPECT_THROW(parse(with("image_grid_pinpoints", "336x672")), FormatError);
  EXPECT_THROW(parse(with("image_grid_pinpoints", json::array())), FormatError);
  EXPECT_THROW(parse(with("text_config", {{"model_type", "qwen2"}})), Unimplemented);
  EXPECT_THROW(parse(with("vision_config", {{"model_type", "siglip_vision_model"}})),
               Unimplemented);
  EXPECT_THROW(parse(with("text_config", {{"rope_scaling", {{"rope_type", "llama3"}}}})),
               Unimplemented);
  EXPECT_THROW(parse(with("vision_feature_select_strategy", "full")).validate("c"), Unimplemented);
  EXPECT_THROW(parse(with("vision_feature_select_strategy", "cls")).validate("c"), FormatError);
  EXPECT_THROW(parse(with("image_grid_pinpoints", {{336, 500}})).validate("c"), FormatError);
  EXPECT_THROW(parse(with("image_grid_pinpoints", {{336 * 64, 336}})).validate("c"), FormatError);
  EXPECT_THROW(parse(with("vision_feature_layer", 30)).validate("c"), FormatError);
  EXPECT_THROW(parse(with("image_token_index", 99999)).validate("c"), FormatError);
  EXPECT_THROW(parse(with("projector_hidden_act", "relu")).validate("c"), Unimplemented);
  json absurd = base;
  absurd["text_config"]["num_hidden_layers"] = int64_t{1} << 40;
  EXPECT_THROW(parse(absurd).validate("c"), FormatError);
  absurd = base;
  absurd["vision_config"] = {{"hidden_size", 1000}, {"num_attention_heads", 10}};
  try {
    parse(absurd).validate("config.json");
    ADD_FAILURE() << "a head_dim of 100 was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("vision_config.hidden_size"), std::string::npos);
  }
}

TEST(LlavaConfig, BothNamingsMapEveryCanonicalName) {
  using llava::Naming;
  EXPECT_EQ(llava::tensor_name(Naming::kOld, "model.layers.0.mlp.up_proj.weight"),
            "language_model.model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(llava::tensor_name(Naming::kNew, "model.layers.0.mlp.up_proj.weight"),
            "model.language_model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(llava::tensor_name(Naming::kOld, "lm_head.weight"), "language_model.lm_head.weight");
  EXPECT_EQ(llava::tensor_name(Naming::kNew, "lm_head.weight"), "lm_head.weight");
  EXPECT_EQ(llava::tensor_name(Naming::kNew, "image_newline"), "model.image_newline");
  EXPECT_EQ(llava::tensor_name(Naming::kNew, "vision_tower.vision_model.pre_layrnorm.weight"),
            "model.vision_tower.vision_model.pre_layrnorm.weight");
  EXPECT_EQ(llava::tensor_name(Naming::kOld, "multi_modal_projector.linear_1.bias"),
            "multi_modal_projector.linear_1.bias");
  EXPECT_EQ(llava::detect_naming({"language_model.model.norm.weight"}, "x"), Naming::kOld);
  EXPECT_EQ(llava::detect_naming({"model.vision_tower.x"}, "x"), Naming::kNew);
  EXPECT_THROW(llava::detect_naming({"language_model.model.a", "model.language_model.b"}, "x"),
               FormatError);
  EXPECT_THROW(llava::detect_naming({"visual.blocks.0"}, "x"), FormatError);
}

// pack_image_features against HF's steps written out literally: the grid crops as one
// [rows, cols] map of patches (crop (i, j) covers rows i*side.., cols j*side..), unpadded, a
// newline after every row, the base crop first.
TEST(LlavaPacking, MatchesHfViewPermuteUnpadNewline) {
  llava::LayoutParams p;
  p.pinpoints = {{112, 224}, {224, 112}, {224, 224}, {336, 112}, {112, 336}};
  p.crop = 112;
  p.patch = 14;
  const int64_t H = 3;
  for (const llava::Resolution r : {llava::Resolution{150, 200}, llava::Resolution{90, 300},
                                    llava::Resolution{230, 120}, llava::Resolution{1, 500}}) {
    SCOPED_TRACE(std::to_string(r.height) + "x" + std::to_string(r.width));
    const llava::ImageLayout L = llava::image_layout(r, p);
    const int64_t side = L.side, per = side * side;
    Tensor crops = Tensor::empty(DType::kF32, {L.n_crops * per, H});
    float* c = crops.data<float>();
    for (int64_t i = 0; i < crops.numel(); ++i) c[i] = static_cast<float>(i);
    const float newline[H] = {-1, -2, -3};
    const Tensor got = llava::pack_image_features(test::test_backend(), crops, L, newline);
    std::vector<float> want(c, c + per * H);  // the base crop, no newline
    const int64_t R = L.tile_rows * side, C = L.tile_cols * side;
    // Unpad as unpad_image does, from the image's aspect ratio against the map's.
    int64_t top = 0, left = 0, rows = R, cols = C;
    if (double(r.width) / double(r.height) > double(C) / double(R)) {
      const int64_t nh = llava::round7_to_int(double(r.height) * (double(C) / double(r.width)));
      top = (R - nh) / 2;
      rows = R - 2 * top;
    } else {
      const int64_t nw = llava::round7_to_int(double(r.width) * (double(R) / double(r.height)));
      left = (C - nw) / 2;
      cols = C - 2 * left;
    }
    for (int64_t y = top; y < top + rows; ++y) {
      for (int64_t x = left; x < left + cols; ++x) {
        const int64_t crop = 1 + (y / side) * L.tile_cols + x / side;
        const float* row = c + (crop * per + (y % side) * side + x % side) * H;
        want.insert(want.end(), row, row + H);
      }
      want.insert(want.end(), newline, newline + H);
    }
    ASSERT_EQ(got.dim(0), L.n_tokens);
    ASSERT_EQ(static_cast<size_t>(got.numel()), want.size());
    EXPECT_EQ(std::vector<float>(got.data<float>(), got.data<float>() + got.numel()), want);
    EXPECT_THROW(llava::pack_image_features(test::test_backend(),
                                            crops.slice(0, 0, per).contiguous(), L, newline),
                 InvalidArgument);
  }
}

TEST_F(LlavaTiny, BothFamiliesAndNamingsLoadThroughTheRegistry) {
  for (const char* name : {"llava-next", "llava-next-new", "llava", "llava-new"}) {
    SCOPED_TRACE(name);
    const bool next = std::string(name).rfind("llava-next", 0) == 0;
    EXPECT_STREQ(family_for_checkpoint(model(name)).name, next ? "llava-next" : "llava");
    const Model m = load_model(test::test_backend(), model(name));
    EXPECT_EQ(m.spec.family, next ? "llava-next" : "llava");
    EXPECT_EQ(m.spec.position_rows, 1);
    EXPECT_EQ(m.spec.modalities, std::vector<Modality>{Modality::kImage});
    EXPECT_EQ(m.spec.stop_ids, std::vector<int32_t>{2});
    EXPECT_EQ(m.spec.vocab_size, 32064);
    const Inspection ins = family_for_checkpoint(model(name)).inspect(model(name));
    bool naming_line = false;
    for (const auto& [label, value] : ins.lines)
      if (label == "naming")
        naming_line =
            value.rfind(std::string(name).find("-new") != std::string::npos ? "new" : "old", 0) ==
            0;
    EXPECT_TRUE(naming_line);
    // A video, or a prompt whose placeholders and images disagree, is refused by name.
    EXPECT_THROW(m.processor->estimate(Modality::kVideo, std::vector<uint8_t>(16)), Unimplemented);
    EXPECT_THROW(m.processor->expand(std::vector<int32_t>{1, 32000, 5}, {}), InvalidArgument);
  }
}

TEST_F(LlavaTiny, SlidingWindowCutsTheContextAndMissingTensorsFailAtLoad) {
  const fs::path copy = dir_ / "window";
  fs::copy(dir_ / "llava-next", copy);
  json cfg = json::parse(std::ifstream(copy / "config.json"));
  cfg["text_config"]["sliding_window"] = 1000;
  std::ofstream(copy / "config.json") << cfg.dump(2);
  EXPECT_EQ(load_model(test::test_backend(), copy.string()).spec.context_length, 1000);
  cfg["vision_config"]["num_hidden_layers"] = 4;
  std::ofstream(copy / "config.json") << cfg.dump(2);
  try {
    load_model(test::test_backend(), copy.string());
    ADD_FAILURE() << "loaded a checkpoint missing vision layer 3";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("encoder.layers.3."), std::string::npos) << e.what();
  }
  cfg["vision_config"]["num_hidden_layers"] = 3;
  cfg["vision_config"]["image_size"] = 224;  // the crops of preprocessor_config.json are 112
  std::ofstream(copy / "config.json") << cfg.dump(2);
  EXPECT_THROW(load_model(test::test_backend(), copy.string()), FormatError);
  fs::remove_all(copy);
}

TEST_F(LlavaTiny, ExpandedImageRunsFollowTheLayout) {
  const Model m = load_model(test::test_backend(), model("llava-next"));
  PreparedMedia a, b;
  a.dims = {150, 200};
  b.dims = {90, 300};
  const llava::Config cfg = llava::load_config(model("llava-next") + "/config.json");
  const llava::LayoutParams lp = llava::layout_params(cfg);
  a.n_tokens = llava::image_layout({150, 200}, lp).n_tokens;
  b.n_tokens = llava::image_layout({90, 300}, lp).n_tokens;
  const std::vector<PreparedMedia> items{a, b};
  const ExpandedPrompt e =
      m.processor->expand(std::vector<int32_t>{1, 7, 32000, 8, 32000, 9}, items);
  ASSERT_EQ(e.spans.size(), 2u);
  EXPECT_EQ(e.spans[0].begin, 2);
  EXPECT_EQ(e.spans[0].n_tokens, a.n_tokens);
  EXPECT_EQ(e.spans[1].begin, 3 + a.n_tokens);
  EXPECT_EQ(static_cast<int64_t>(e.ids.size()), 4 + a.n_tokens + b.n_tokens);
  EXPECT_TRUE(e.positions.empty());
  PreparedMedia wrong = a;
  wrong.n_tokens += 1;
  EXPECT_THROW(m.processor->expand(std::vector<int32_t>{32000}, {&wrong, 1}), InvalidArgument);
  EXPECT_THROW(m.runner->encode(wrong), InvalidArgument);
}
