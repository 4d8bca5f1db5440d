// The model seam as the engine sees it: the registry picks the family from config.json (and
// refuses others by name), the ModelSpec describes the tiny checkpoint, the Processor's header
// estimate equals what preprocessing produces, its expansion equals get_rope_index's, content
// keys follow the bytes, and the Runner's encoder equals the vision tower.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../common/no_kernels_backend.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "media/image.h"
#include "models/qwen2_vl/processor.h"
#include "models/qwen2_vl/tiny_checkpoint.h"
#include "models/qwen2_vl/vision_tower.h"
#include "models/registry.h"
#include "test_model.h"

namespace fs = std::filesystem;
using namespace mmrt;
using namespace mmrt::models;

namespace {

class Registry : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("mmrt_registry_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    qwen2_vl::TinyOptions o;
    o.dtype = DType::kF32;
    o.seed = 3;
    qwen2_vl::make_tiny_checkpoint((dir_ / "m").string(), o);
    const std::string cmd =
        std::string(MMRT_REF_PYTHON) +
        " -c \"from PIL import Image; import numpy as np; r=np.random.default_rng(1); "
        "Image.fromarray(r.integers(0,255,(70,130,3),dtype=np.uint8)).save('" +
        (dir_ / "a.png").string() + "')\"";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string model() { return (dir_ / "m").string(); }
  static std::vector<uint8_t> png() {
    std::ifstream f(dir_ / "a.png", std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  // A copy of the checkpoint whose config.json `edit` changed.
  static std::string edited(const std::string& name,
                            const std::function<void(nlohmann::json&)>& edit) {
    const fs::path d = dir_ / name;
    fs::remove_all(d);
    fs::copy(dir_ / "m", d);
    std::ifstream in(d / "config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    edit(j);
    std::ofstream(d / "config.json") << j.dump(2);
    return d.string();
  }
  static fs::path dir_;
};
fs::path Registry::dir_;

}  // namespace

TEST_F(Registry, ABackendWithoutTheFamilysOpsIsRefusedBeforeLoading) {
  const test::NoKernelsBackend nk;  // cuda:0, host memory, no kernels (a new device's first day)
  try {
    load_model(nk, model());
    FAIL() << "loaded on a backend without kernels";
  } catch (const Unimplemented& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("a qwen2-vl model cannot run on cuda:0"), std::string::npos) << m;
    for (const char* op : {"linear", "paged_attention", "rms_norm", "varlen_attention", "kv_write"})
      EXPECT_NE(m.find(op), std::string::npos) << op << " not named in: " << m;
  }
  EXPECT_EQ(nk.transfers().to_device, 0u);  // refused before any weight moved
  for (const ModelFamily* f : families()) EXPECT_FALSE(f->ops.empty()) << f->name;
}

TEST_F(Registry, PicksTheFamilyFromConfigJson) {
  EXPECT_STREQ(family_for_checkpoint(model()).name, "qwen2-vl");
  EXPECT_STREQ(family_named("qwen2-vl").name, "qwen2-vl");
  // model_type alone (no "architectures") is enough.
  const std::string mt = edited("mt", [](nlohmann::json& j) { j.erase("architectures"); });
  EXPECT_STREQ(family_for_checkpoint(mt).name, "qwen2-vl");
  const std::string other = edited("other", [](nlohmann::json& j) {
    j["architectures"] = {"PaliGemmaForConditionalGeneration"};
  });
  try {
    family_for_checkpoint(other);
    ADD_FAILURE() << "an unsupported architecture was accepted";
  } catch (const Unimplemented& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("\"PaliGemmaForConditionalGeneration\" is not supported"), std::string::npos)
        << m;
    EXPECT_NE(m.find("LlavaNextForConditionalGeneration (llava-next)"), std::string::npos) << m;
    EXPECT_NE(m.find("LlavaForConditionalGeneration (llava)"), std::string::npos) << m;
    EXPECT_NE(m.find("FuyuForCausalLM (fuyu)"), std::string::npos) << m;
    EXPECT_NE(m.find("supported: Qwen2VLForConditionalGeneration (qwen2-vl)"), std::string::npos)
        << m;
  }
  EXPECT_THROW(load_model(test::test_backend(), other), Unimplemented);
  EXPECT_THROW(family_for_checkpoint((dir_ / "nothing").string()), NotFound);
  EXPECT_THROW(family_named("llama"), InvalidArgument);
}

TEST_F(Registry, SpecDescribesTheCheckpoint) {
  const Model m = load_model(test::test_backend(), model());
  const ModelSpec& s = m.spec;
  const qwen2_vl::Config cfg = qwen2_vl::load_config(model() + "/config.json");
  EXPECT_EQ(s.family, "qwen2-vl");
  EXPECT_EQ(s.architecture, "Qwen2VLForConditionalGeneration");
  EXPECT_EQ(s.vocab_size, cfg.text.vocab_size);
  EXPECT_EQ(s.context_length, cfg.text.max_position_embeddings);
  EXPECT_EQ(s.position_rows, 3);
  EXPECT_EQ(s.embed_dim, cfg.text.hidden_size);
  ASSERT_EQ(s.kv_layers.size(), static_cast<size_t>(cfg.text.num_hidden_layers));
  EXPECT_EQ(s.kv_layers[0].n_kv_heads, cfg.text.num_key_value_heads);
  EXPECT_EQ(s.kv_layers[0].head_dim, cfg.text.head_dim());
  EXPECT_TRUE(s.takes(Modality::kImage));
  EXPECT_FALSE(s.takes(Modality::kAudio));
  // Stop ids: config.json's eos and generation_config.json's list.
  EXPECT_NE(std::find(s.stop_ids.begin(), s.stop_ids.end(), cfg.text.eos_token_id),
            s.stop_ids.end());
  EXPECT_NE(std::find(s.stop_ids.begin(), s.stop_ids.end(), cfg.text.bos_token_id),
            s.stop_ids.end())
      << "<|endoftext|> is in generation_config.json's eos list";
  const kernels::KvCacheConfig kc = m.runner->kv_config();
  EXPECT_EQ(kc.n_layers, cfg.text.num_hidden_layers);
}

TEST_F(Registry, ProcessorEstimatesExpandsAndKeys) {
  const Model m = load_model(test::test_backend(), model());
  const Processor& p = *m.processor;
  const std::vector<uint8_t> img = png();
  const MediaEstimate e = p.estimate(Modality::kImage, img);
  const media::MediaContext ctx{};
  const PreparedMedia prep = p.preprocess(Modality::kImage, img, ctx);
  EXPECT_EQ(e.n_tokens, prep.n_tokens) << "the header estimate must be exact for images";
  EXPECT_EQ(e.encoder_cost, prep.encoder_cost);
  EXPECT_EQ(e.source_pixels, 70 * 130);
  ASSERT_EQ(prep.dims.size(), 3u);
  EXPECT_EQ(prep.features.dim(0), prep.encoder_cost);
  // Expansion and positions: exactly qwen2_vl::expand_image_prompt on the same grid.
  const io::Tokenizer tok = io::Tokenizer::from_file(model() + "/tokenizer.json");
  ChatMessage user;
  user.role = "user";
  user.content = {{ContentPart::Kind::kImage, ""}, {ContentPart::Kind::kText, "What is it?"}};
  const std::vector<int32_t> ids = tok.encode(p.render_chat({user}));
  const std::vector<PreparedMedia> items{prep};
  const ExpandedPrompt x = p.expand(ids, items);
  const qwen2_vl::Config cfg = qwen2_vl::load_config(model() + "/config.json");
  const qwen2_vl::GridThw g{prep.dims[0], prep.dims[1], prep.dims[2]};
  const qwen2_vl::MultimodalPrompt want = qwen2_vl::expand_image_prompt(ids, {&g, 1}, cfg);
  EXPECT_EQ(x.ids, want.ids);
  EXPECT_EQ(x.positions, want.positions);
  EXPECT_EQ(x.rope_delta, want.rope_delta);
  ASSERT_EQ(x.spans.size(), 1u);
  EXPECT_EQ(x.spans[0].begin, want.items[0].begin);
  EXPECT_EQ(x.spans[0].n_tokens, prep.n_tokens);
  EXPECT_THROW(p.expand(ids, {}), InvalidArgument);
  // Keys: the same bytes give the same key, any change another.
  std::vector<uint8_t> other = img;
  other.back() ^= 1;
  EXPECT_EQ(p.content_key(Modality::kImage, img), p.content_key(Modality::kImage, img));
  EXPECT_NE(p.content_key(Modality::kImage, img), p.content_key(Modality::kImage, other));
  // No audio for Qwen2-VL: a clear Unimplemented, not a crash.
  EXPECT_THROW(p.estimate(Modality::kAudio, img), Unimplemented);
}

TEST_F(Registry, RunnerEncodesAsTheVisionTowerDoes) {
  const Model m = load_model(test::test_backend(), model());
  const PreparedMedia prep = m.processor->preprocess(Modality::kImage, png(), {});
  const Tensor got = m.runner->encode(prep);  // [n_tokens, hidden]
  const io::SafeTensors st = io::SafeTensors::open(model());
  const qwen2_vl::Config cfg = qwen2_vl::load_config(model() + "/config.json");
  auto vt = qwen2_vl::VisionTower::load(test::test_backend(), st, cfg, kernels::WeightFormat::kF32);
  const qwen2_vl::GridThw g{prep.dims[0], prep.dims[1], prep.dims[2]};
  const Tensor want = vt->forward(prep.features, {&g, 1});
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0);
  EXPECT_GT(m.runner->encode_flops(prep), 0.0);
}

// The encoder precision a load option means here: auto is int8 only where the backend multiplies
// int8 by int8 and the model is not f32; the media keys name it (ModelSpec::encoder_precision).
TEST_F(Registry, EncoderPrecisionFollowsTheOptionTheBackendAndTheModel) {
  const kernels::Backend& be = test::test_backend();
  using WF = kernels::WeightFormat;
  auto with = [](const char* choice, int64_t keep) {
    LoadOptions o;
    o.encoder_weights = choice;
    o.encoder_keep_last = keep;
    return o;
  };
  const EncoderPrecision f32 = encoder_precision(be, with("auto", 3), WF::kF32);
  EXPECT_FALSE(f32.int8) << "an f32 model keeps an exact encoder";
  EXPECT_EQ(f32.fmt, WF::kF32);
  EXPECT_FALSE(encoder_precision(be, with("bf16", 3), WF::kBF16).int8);
  EXPECT_THROW(encoder_precision(be, with("fp4", 3), WF::kBF16), InvalidArgument);
  EXPECT_THROW(encoder_precision(be, with("auto", -1), WF::kBF16), InvalidArgument);
  const EncoderPrecision autob = encoder_precision(be, with("auto", 3), WF::kBF16);
  bool native = true;
  try {
    encoder_precision(be, with("int8", 3), WF::kBF16);
  } catch (const InvalidArgument&) {
    native = false;
  }
  EXPECT_EQ(autob.int8, native) << "auto is int8 exactly where int8 can run";
  EXPECT_EQ(autob.fmt, WF::kBF16);
  // Blocks 0..depth-4 in int8 on the integer GEMM, the last three and depth <= 3 not at all.
  EncoderPrecision p;
  p.int8 = true;
  EXPECT_EQ(p.block_format(28, 32), WF::kInt8);
  EXPECT_EQ(p.block_format(29, 32), WF::kBF16);
  EXPECT_EQ(p.block_options(0, 32).int8_gemm, kernels::Int8Gemm::kQ8Row);
  EXPECT_EQ(p.block_options(31, 32).int8_gemm, kernels::Int8Gemm::kBF16);
  EXPECT_EQ(p.describe(3), "bf16");
  EXPECT_EQ(p.describe(32), "int8 (blocks 0-28; the last 3 and the projections bf16)");
  p.only_block = 5;  // the sensitivity report's loads
  EXPECT_EQ(p.block_format(5, 32), WF::kInt8);
  EXPECT_EQ(p.block_format(4, 32), WF::kBF16);
  EXPECT_EQ(p.describe(32), "int8 (block 5 only; the rest bf16)");
  // A model loaded on its defaults says what its encoder runs.
  const Model m = load_model(be, model());
  EXPECT_EQ(m.spec.encoder_precision, "f32");
  EXPECT_EQ(m.spec.encoder_blocks, 2);
}

TEST_F(Registry, ADevicesKvCacheIsSizedFromItsMemoryFraction) {
  // A device reporting 8 GiB of 10 free (2 GiB in use: the weights and whatever else is there).
  constexpr uint64_t kGiB = 1ull << 30;
  const test::EmulatedDevice gpu({.threads = 1}, {.free = 8 * kGiB, .total = 10 * kGiB});
  const models::Model m = load_model(gpu, model());
  KvOptions o{.bytes = 256ull << 20, .device_fraction = 0.5};
  const kernels::KvCacheConfig kc = kv_cache_config(gpu, *m.runner, o);
  const uint64_t per_block = kernels::kv_bytes_per_block(kc);
  EXPECT_EQ(static_cast<uint64_t>(kc.num_blocks), 3 * kGiB / per_block);  // 5 GiB allowed - 2
  // Explicit blocks win; the CPU ignores the fraction (--kv-mb's bytes).
  o.blocks = 7;
  EXPECT_EQ(kv_cache_config(gpu, *m.runner, o).num_blocks, 7);
  o.blocks = 0;
  const kernels::CpuBackend cpu({.threads = 1});
  EXPECT_EQ(static_cast<uint64_t>(kv_cache_config(cpu, *m.runner, o).num_blocks),
            (256ull << 20) / per_block);
  // A fraction the memory in use already exceeds: refused, naming the numbers and the options.
  o.device_fraction = 0.15;
  try {
    kv_cache_config(gpu, *m.runner, o);
    ADD_FAILURE() << "a KV cache with no room was sized";
  } catch (const ResourceExhausted& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cuda:99"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--gpu-memory-fraction"), std::string::npos) << msg;
  }
  o.device_fraction = 1.5;
  EXPECT_THROW(kv_cache_config(gpu, *m.runner, o), InvalidArgument);
}
