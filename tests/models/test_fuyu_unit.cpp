// Fuyu without a reference process (also under ASan + UBSan): config.json read as FuyuConfig
// reads it (text_config, or the flat top-level fields when absent) and its refusals, both tensor
// namings, make-tiny-model checkpoints loading, inspecting and running through the registry, the
// processor's token stream and its errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/tokenizer.h"
#include "media/image.h"
#include "models/fuyu/weights_spec.h"
#include "models/registry.h"
#include "models/tiny_registry.h"
#include "test_model.h"

namespace fs = std::filesystem;
using namespace mmrt;
using namespace mmrt::models;
using json = nlohmann::json;

namespace {

fuyu::Config parse(const json& j) {
  return fuyu::parse_config(j.dump(), "config.json");
}

class FuyuTiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("mmrt_fuyu_unit_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    TinyModelOptions o;
    o.dtype = DType::kF32;
    o.seed = 5;
    make_tiny_model(family_named("fuyu"), (dir_ / "old").string(), o);
    o.naming = "new";
    o.dtype = DType::kBF16;
    make_tiny_model(family_named("fuyu"), (dir_ / "new").string(), o);
    const std::string cmd =
        std::string(MMRT_REF_PYTHON) +
        " -c \"from PIL import Image; import numpy as np; r=np.random.default_rng(2); "
        "Image.fromarray(r.integers(0,255,(70,100,3),dtype=np.uint8)).save('" +
        (dir_ / "img.png").string() + "')\"";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string model(const std::string& name) { return (dir_ / name).string(); }
  static fs::path dir_;
};
fs::path FuyuTiny::dir_;

}  // namespace

TEST(FuyuConfig, TextConfigOrTheTopLevelFields) {
  // No text_config: the decoder from the flat fields, the rest the class defaults (Fuyu-8B).
  fuyu::Config c = parse({{"architectures", {"FuyuForCausalLM"}}, {"num_hidden_layers", 3}});
  EXPECT_EQ(c.text.num_hidden_layers, 3);
  EXPECT_EQ(c.text.hidden_size, 4096);
  EXPECT_EQ(c.text.num_attention_heads, 64);
  EXPECT_EQ(c.text.rotary_dim(), 32);
  EXPECT_EQ(c.text.rope_theta, 25000.0);
  EXPECT_TRUE(c.text.qk_layernorm);
  EXPECT_EQ(c.patch_dim(), 2700);
  EXPECT_EQ(c.image_token_id, 71011);
  EXPECT_NO_THROW(c.validate("config.json"));
  // A text_config is what the decoder is made from: its missing fields take the class
  // defaults, not the top-level values.
  c = parse({{"model_type", "fuyu"},
             {"num_hidden_layers", 3},
             {"text_config", {{"hidden_size", 512}, {"num_attention_heads", 8}}}});
  EXPECT_EQ(c.text.num_hidden_layers, 36);
  EXPECT_EQ(c.text.hidden_size, 512);
  EXPECT_EQ(c.text.head_dim(), 64);
  // The patch embedding's width (top-level hidden_size) must equal the decoder's.
  EXPECT_THROW(c.validate("config.json"), FormatError);
  c.hidden_size = 512;
  EXPECT_NO_THROW(c.validate("config.json"));
}

TEST(FuyuConfig, RefusesWhatItCannotRun) {
  const json base = {{"architectures", {"FuyuForCausalLM"}}};
  auto with = [&](const std::string& key, const json& v) {
    json j = base;
    j[key] = v;
    return j;
  };
  EXPECT_THROW(parse(with("architectures", {"LlavaForConditionalGeneration"})), FormatError);
  EXPECT_THROW(parse(with("rope_scaling", {{"type", "linear"}, {"factor", 2.0}})), Unimplemented);
  EXPECT_THROW(parse(with("text_config", "persimmon")), FormatError);
  EXPECT_THROW(parse(with("hidden_act", "gelu")).validate("c"), Unimplemented);
  EXPECT_THROW(parse(with("num_channels", 1)).validate("c"), Unimplemented);
  EXPECT_THROW(parse(with("partial_rotary_factor", 0.0)).validate("c"), FormatError);
  EXPECT_THROW(parse(with("partial_rotary_factor", 1.5)).validate("c"), FormatError);
  EXPECT_THROW(parse(with("layer_norm_eps", -1.0)).validate("c"), FormatError);
  EXPECT_THROW(parse(with("image_token_id", 300000)).validate("c"), FormatError);
  EXPECT_THROW(parse(with("patch_size", 0)).validate("c"), FormatError);
  EXPECT_THROW(parse(with("num_hidden_layers", int64_t{1} << 40)).validate("c"), FormatError);
  try {
    json j = base;
    j["text_config"] = {{"hidden_size", 1000}, {"num_attention_heads", 10}};
    j["hidden_size"] = 1000;
    parse(j).validate("config.json");
    ADD_FAILURE() << "a head_dim of 100 was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim"), std::string::npos) << e.what();
  }
}

TEST(FuyuConfig, BothNamingsMapPersimmonsNames) {
  using fuyu::Naming;
  EXPECT_EQ(fuyu::tensor_name(Naming::kOld, "model.layers.0.self_attn.qkv_proj.weight"),
            "language_model.model.layers.0.self_attn.query_key_value.weight");
  EXPECT_EQ(fuyu::tensor_name(Naming::kNew, "model.layers.1.mlp.down_proj.bias"),
            "model.language_model.layers.1.mlp.dense_4h_to_h.bias");
  EXPECT_EQ(fuyu::tensor_name(Naming::kOld, "model.norm.weight"),
            "language_model.model.final_layernorm.weight");
  EXPECT_EQ(fuyu::tensor_name(Naming::kOld, "lm_head.weight"), "language_model.lm_head.weight");
  EXPECT_EQ(fuyu::tensor_name(Naming::kNew, "lm_head.weight"), "lm_head.weight");
  EXPECT_EQ(fuyu::tensor_name(Naming::kOld, "vision_embed_tokens.weight"),
            "vision_embed_tokens.weight");
  EXPECT_EQ(fuyu::tensor_name(Naming::kNew, "vision_embed_tokens.bias"),
            "model.vision_embed_tokens.bias");
}

TEST_F(FuyuTiny, LoadsInspectsAndGeneratesThroughTheRegistry) {
  for (const char* name : {"old", "new"}) {
    SCOPED_TRACE(name);
    EXPECT_STREQ(family_for_checkpoint(model(name)).name, "fuyu");
    const Inspection ins = family_for_checkpoint(model(name)).inspect(model(name));
    bool saw_naming = false;
    for (const auto& [k, v] : ins.lines)
      if (k == "naming") saw_naming = v.rfind(name, 0) == 0;
    EXPECT_TRUE(saw_naming);
    auto lm = test::load_test_model(model(name), {});
    const Processor& proc = lm->processor();
    EXPECT_EQ(lm->spec().family, "fuyu");
    EXPECT_EQ(lm->spec().position_rows, 1);
    // A 70x100 image: 3x4 patches, each row then |NEWLINE|.
    std::ifstream f(dir_ / "img.png", std::ios::binary);
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(f),
                                     std::istreambuf_iterator<char>()};
    const MediaEstimate est = proc.estimate(Modality::kImage, bytes, {});
    EXPECT_EQ(est.dims, (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(est.n_tokens, 15);
    const PreparedMedia m = proc.preprocess(Modality::kImage, bytes, {});
    EXPECT_EQ(m.n_tokens, 15);
    EXPECT_EQ(m.features.shape(), (std::vector<int64_t>{12, 2700}));
    const Tensor enc = lm->runner().encode(m);
    EXPECT_EQ(enc.shape(), (std::vector<int64_t>{15, lm->spec().embed_dim}));

    const io::Tokenizer tok = io::Tokenizer::from_file(model(name) + "/tokenizer.json");
    ChatMessage user;
    user.role = "user";
    user.content = {{ContentPart::Kind::kImage, ""}, {ContentPart::Kind::kText, "Hi"}};
    EXPECT_EQ(proc.render_chat({user}, true), "|SPEAKER|<s>Hi<0x04>");
    const std::vector<int32_t> ids = proc.chat_ids(tok, {user}, true);
    const ExpandedPrompt p = proc.expand(ids, {&m, 1});
    ASSERT_EQ(p.spans.size(), 1u);
    EXPECT_EQ(p.spans[0].begin, 0);
    EXPECT_EQ(p.spans[0].n_tokens, 15);
    const int32_t speaker = *tok.piece_to_id("|SPEAKER|"), newline = *tok.piece_to_id("|NEWLINE|");
    for (int64_t j = 0; j < 15; ++j) EXPECT_EQ(p.ids[j], j % 5 == 4 ? newline : speaker) << j;
    EXPECT_EQ(p.ids[15], *tok.piece_to_id("<s>"));
    EXPECT_EQ(p.ids.back(), *tok.piece_to_id("<0x04>"));
    // Placeholder and image counts must agree; audio and video are refused by name.
    EXPECT_THROW(proc.expand(ids, {}), InvalidArgument);
    const PreparedMedia two[] = {m, m};
    EXPECT_THROW(proc.expand(ids, two), InvalidArgument);
    ChatMessage av = user;
    av.content[0].kind = ContentPart::Kind::kAudio;
    EXPECT_THROW(proc.render_chat({av}, true), Unimplemented);
    EXPECT_THROW(proc.preprocess(Modality::kVideo, bytes, {}), Unimplemented);
    PreparedMedia bad = m;
    bad.dims = {4, 3};
    EXPECT_THROW(lm->runner().encode(bad), InvalidArgument);
  }
}

// An encode worker loads the encoders only (LoadOptions::encoders_only): Fuyu's patch projection
// and the newline row it takes from the embedding table encode bit-identically to the whole
// model; the language model cannot run.
TEST_F(FuyuTiny, EncodersOnlyEncodeAsTheWholeModel) {
  std::ifstream f(dir_ / "img.png", std::ios::binary);
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(f),
                                   std::istreambuf_iterator<char>()};
  Model whole = load_model(test::test_backend(), model("new"));
  LoadOptions only;
  only.encoders_only = true;
  Model enc = load_model(test::test_backend(), model("new"), only);
  EXPECT_EQ(enc.spec.encoder_identity(), whole.spec.encoder_identity());
  const PreparedMedia m = whole.processor->preprocess(Modality::kImage, bytes, {});
  const Tensor a = whole.runner->encode(m), b = enc.runner->encode(m);
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
  EXPECT_EQ(enc.runner->weight_bytes(), 0u);
  kernels::KvCacheConfig kc = enc.runner->kv_config();
  kc.num_blocks = 1;
  kernels::KvCache kv(test::test_backend(), kc);
  const int32_t tok[] = {1};
  SeqStep step;
  step.tokens = tok;
  EXPECT_THROW(enc.runner->forward({&step, 1}, kv), FailedPrecondition);
}

TEST_F(FuyuTiny, MissingOrMismatchedTensorsAreNamed) {
  // A checkpoint whose config says more layers than its tensors hold.
  const fs::path d = dir_ / "short";
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(model("old")))
    fs::copy_file(e.path(), d / e.path().filename(), fs::copy_options::overwrite_existing);
  json j = json::parse(std::ifstream(d / "config.json"));
  j["text_config"]["num_hidden_layers"] = 3;
  std::ofstream(d / "config.json") << j.dump(2);
  try {
    load_model(test::test_backend(), d.string());
    ADD_FAILURE() << "a missing layer was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.2"), std::string::npos) << e.what();
  }
}
