// make-tiny-model output: re-loads with every tensor as the expected-tensor table says, carries a
// tokenizer that io::Tokenizer loads with the ids config.json names; the checker's failure
// messages; and the real `mmrt inspect` binary on a good and a corrupted checkpoint. (The
// independent Python check of the same folders: test_tiny_model_ref.cpp.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/convert.h"
#include "core/thread_pool.h"
#include "io/bpe_trainer.h"
#include "io/generation_config.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "models/qwen2_vl/tiny_checkpoint.h"
#include "models/qwen2_vl/weights_spec.h"
#include "test_util.h"

namespace mmrt {
namespace {

namespace fs = std::filesystem;
using models::qwen2_vl::TinyOptions;
namespace qwen = models::qwen2_vl;
using nlohmann::json;
using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;

std::vector<float> as_f32(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kF32)
    std::memcpy(v.data(), t.raw(), v.size() * 4);
  else
    bf16_to_f32(static_cast<const uint16_t*>(t.raw()), v.data(), v.size());
  return v;
}

// Checks the folder against the expected-tensor table and the tokenizer; returns the config.
models::qwen2_vl::Config check_folder(const fs::path& dir, const models::qwen2_vl::TinyResult& r,
                                      models::qwen2_vl::Naming naming, bool tied, DType dtype) {
  models::qwen2_vl::Config cfg = models::qwen2_vl::load_config((dir / "config.json").string());
  cfg.validate("config.json");
  EXPECT_EQ(models::qwen2_vl::config_to_json(cfg), models::qwen2_vl::config_to_json(r.config));
  EXPECT_EQ(cfg.text.tie_word_embeddings, tied);
  io::SafeTensors st = io::SafeTensors::open(dir.string());
  models::qwen2_vl::check_checkpoint(st, cfg);
  EXPECT_EQ(models::qwen2_vl::detect_naming(st.names(), dir.string()), naming);
  auto expected = models::qwen2_vl::expected_tensors(cfg, tied);
  EXPECT_EQ(st.size(), expected.size());
  EXPECT_EQ(r.n_tensors, expected.size());
  int64_t params = 0;
  for (const auto& e : expected) {
    const std::string name = models::qwen2_vl::tensor_name(naming, e.name);
    if (!st.contains(name)) {
      ADD_FAILURE() << "missing " << name;
      continue;
    }
    EXPECT_EQ(st.info(name).shape, e.shape) << name;
    EXPECT_EQ(st.info(name).dtype, dtype) << name;
    params += shape_numel(e.shape);
    if (models::qwen2_vl::is_norm_param(e.name)) {
      const float want = e.name.ends_with(".bias") ? 0.f : 1.f;
      size_t bad = 0;
      for (float x : as_f32(st.get(name))) bad += x != want;
      EXPECT_EQ(bad, 0u) << name << " should be all " << want;
    }
  }
  EXPECT_EQ(r.n_params, params);
  EXPECT_EQ(r.n_bytes, st.total_bytes());
  EXPECT_EQ(st.contains("lm_head.weight"), !tied);

  // The tokenizer loads with io::Tokenizer and its special ids are the ones in config.json.
  io::Tokenizer tok = io::Tokenizer::from_file((dir / "tokenizer.json").string());
  EXPECT_EQ(tok.vocab_size(), r.tokenizer_size);
  EXPECT_LE(tok.vocab_size(), cfg.text.vocab_size);
  const std::pair<const char*, int64_t> ids[] = {{"<|endoftext|>", cfg.text.bos_token_id},
                                                 {"<|im_end|>", cfg.text.eos_token_id},
                                                 {"<|vision_start|>", cfg.vision_start_token_id},
                                                 {"<|vision_end|>", cfg.vision_end_token_id},
                                                 {"<|vision_pad|>", cfg.vision_token_id},
                                                 {"<|image_pad|>", cfg.image_token_id},
                                                 {"<|video_pad|>", cfg.video_token_id}};
  for (const auto& [piece, id] : ids) {
    auto got = tok.piece_to_id(piece);
    EXPECT_EQ(got.value_or(-1), id) << piece;
    EXPECT_TRUE(tok.is_special(static_cast<int32_t>(id))) << piece;
  }
  // generation_config.json: eos [<|im_end|>, <|endoftext|>], pad <|endoftext|>.
  io::GenerationConfig gc = io::load_generation_config((dir / "generation_config.json").string());
  EXPECT_EQ(gc.eos_token_ids, (std::vector<int32_t>{static_cast<int32_t>(cfg.text.eos_token_id),
                                                    static_cast<int32_t>(cfg.text.bos_token_id)}));
  EXPECT_EQ(gc.pad_token_id, static_cast<int32_t>(cfg.text.bos_token_id));
  auto enc = tok.encode("<|im_start|>user\nHello<|im_end|>");
  EXPECT_EQ(enc.back(), cfg.text.eos_token_id);
  EXPECT_EQ(tok.decode(enc), "<|im_start|>user\nHello<|im_end|>");
  return cfg;
}

TEST(TinyModel, DefaultTinyIsUntiedOldNamingBf16) {
  TempDir dir("tiny");
  models::qwen2_vl::TinyResult r = models::qwen2_vl::make_tiny_checkpoint(dir.path().string(), {});
  models::qwen2_vl::Config cfg =
      check_folder(dir.path(), r, models::qwen2_vl::Naming::kOld, false, DType::kBF16);
  // Preset dimensions.
  EXPECT_EQ(cfg.text.hidden_size, 64);
  EXPECT_EQ(cfg.text.num_hidden_layers, 2);
  EXPECT_EQ(cfg.text.head_dim(), 16);
  EXPECT_EQ(cfg.text.num_key_value_heads, 2);
  EXPECT_EQ(cfg.text.intermediate_size, 128);
  EXPECT_EQ(cfg.text.mrope_section, (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(cfg.vision.depth, 2);
  EXPECT_EQ(cfg.vision.embed_dim, 32);
  EXPECT_EQ(cfg.vision.head_dim(), 16);
  EXPECT_EQ(cfg.vision.hidden_size, 64);
  // Trained tokenizer: 1000 ordinary tokens, the 14 specials right after, vocab padded to 64.
  const auto& specials = models::qwen2_vl::special_tokens();
  ASSERT_EQ(specials.size(), 14u);
  EXPECT_EQ(cfg.text.bos_token_id, 1000);
  EXPECT_EQ(r.tokenizer_size, 1014);
  EXPECT_EQ(cfg.text.vocab_size, 1024);
  EXPECT_EQ(r.files.back(), "model.safetensors");
}

TEST(TinyModel, NewNamingTiedF32) {
  TempDir dir("tiny");
  TinyOptions o;
  o.naming = models::qwen2_vl::Naming::kNew;
  o.tied = true;
  o.dtype = DType::kF32;
  models::qwen2_vl::TinyResult r = models::qwen2_vl::make_tiny_checkpoint(dir.path().string(), o);
  check_folder(dir.path(), r, models::qwen2_vl::Naming::kNew, true, DType::kF32);
  EXPECT_EQ(r.config.torch_dtype, "float32");
}

TEST(TinyModel, ShardedWithIndex) {
  TempDir dir("tiny");
  TinyOptions o;
  o.naming = models::qwen2_vl::Naming::kNew;
  o.max_shard_bytes = 200'000;
  ThreadPool pool(2);
  o.pool = &pool;
  models::qwen2_vl::TinyResult r = models::qwen2_vl::make_tiny_checkpoint(dir.path().string(), o);
  EXPECT_EQ(r.files.back(), "model.safetensors.index.json");
  io::SafeTensors st = io::SafeTensors::open(dir.path().string());
  EXPECT_GT(st.files().size(), 2u);
  check_folder(dir.path(), r, models::qwen2_vl::Naming::kNew, false, DType::kBF16);
}

TEST(TinyModel, SeededAndIndependentOfNamingAndThreads) {
  TempDir a("tiny"), b("tiny"), c("tiny");
  ThreadPool one(1), two(2);
  TinyOptions o;
  o.seed = 7;
  o.pool = &one;
  models::qwen2_vl::make_tiny_checkpoint(a.path().string(), o);
  o.naming = models::qwen2_vl::Naming::kNew;
  o.pool = &two;
  models::qwen2_vl::make_tiny_checkpoint(b.path().string(), o);
  o.seed = 8;
  models::qwen2_vl::make_tiny_checkpoint(c.path().string(), o);
  io::SafeTensors sa = io::SafeTensors::open(a.path().string());
  io::SafeTensors sb = io::SafeTensors::open(b.path().string());
  io::SafeTensors sc = io::SafeTensors::open(c.path().string());
  const std::string old_name = "model.layers.1.mlp.up_proj.weight";
  const std::string new_name = "model.language_model.layers.1.mlp.up_proj.weight";
  Tensor ta = sa.get(old_name), tb = sb.get(new_name), tc = sc.get(new_name);
  EXPECT_EQ(std::memcmp(ta.raw(), tb.raw(), ta.nbytes()), 0) << "same seed, same values";
  EXPECT_NE(std::memcmp(ta.raw(), tc.raw(), ta.nbytes()), 0) << "another seed, other values";
  // Two different tensors of one checkpoint differ too.
  Tensor gate = sa.get("model.layers.1.mlp.gate_proj.weight");
  EXPECT_NE(std::memcmp(ta.raw(), gate.raw(), ta.nbytes()), 0);
}

TEST(TinyModel, RandomWeightsLookNormal) {
  TempDir dir("tiny");
  models::qwen2_vl::make_tiny_checkpoint(dir.path().string(), {});
  io::SafeTensors st = io::SafeTensors::open(dir.path().string());
  std::vector<float> v = as_f32(st.get("model.embed_tokens.weight"));  // 1024 x 64
  double sum = 0, sq = 0;
  size_t within1 = 0, within2 = 0;
  for (float x : v) {
    sum += x;
    sq += double(x) * x;
    within1 += std::fabs(x) < 0.02f;
    within2 += std::fabs(x) < 0.04f;
  }
  const double n = static_cast<double>(v.size());
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(sd, 0.02, 0.0008);
  EXPECT_NEAR(within1 / n, 0.6827, 0.02);  // normal: 68.3% within 1 sd, 95.4% within 2
  EXPECT_NEAR(within2 / n, 0.9545, 0.01);
}

TEST(TinyModel, CopiesAGivenTokenizerAndUsesItsIds) {
  TempDir src("tok"), dir("tiny");
  io::BpeTrainOptions bo;
  bo.vocab_size = 300;
  bo.special_tokens = models::qwen2_vl::special_tokens();
  bo.special_first_id = 400;
  const std::string text = io::train_byte_level_bpe(io::builtin_training_corpus(), bo);
  testing::write_bytes(src.file("tokenizer.json"), text);
  TinyOptions o;
  o.tokenizer_path = src.file("tokenizer.json");
  models::qwen2_vl::TinyResult r = models::qwen2_vl::make_tiny_checkpoint(dir.path().string(), o);
  EXPECT_EQ(testing::read_bytes(dir.file("tokenizer.json")), text);
  EXPECT_EQ(r.config.text.bos_token_id, 400);
  EXPECT_EQ(r.config.text.eos_token_id, 402);
  EXPECT_EQ(r.config.video_token_id, 413);
  EXPECT_EQ(r.tokenizer_size, 414);
  EXPECT_EQ(r.config.text.vocab_size, 448);
  check_folder(dir.path(), r, models::qwen2_vl::Naming::kOld, false, DType::kBF16);

  testing::write_bytes(src.file("bad.json"), R"({"model":{"vocab":{"a":0}},"added_tokens":[]})");
  o.tokenizer_path = src.file("bad.json");
  EXPECT_THAT(error_of<InvalidArgument>(
                  [&] { models::qwen2_vl::make_tiny_checkpoint(dir.path().string(), o); }),
              HasSubstr("has no <|endoftext|> added token"));
}

TEST(TinyModel, SizePresets) {
  EXPECT_EQ(models::qwen2_vl::parse_tiny_size("2b-shape"), models::qwen2_vl::TinySize::k2BShape);
  EXPECT_THROW(models::qwen2_vl::parse_tiny_size("huge"), InvalidArgument);
  models::qwen2_vl::Config s =
      models::qwen2_vl::tiny_base_config(models::qwen2_vl::TinySize::kSmall);
  EXPECT_EQ(s.text.head_dim(), 64);
  EXPECT_EQ(s.vision.head_dim(), 64);
  EXPECT_TRUE(s.text.tie_word_embeddings);
  models::qwen2_vl::Config b =
      models::qwen2_vl::tiny_base_config(models::qwen2_vl::TinySize::k2BShape);
  b.validate("2b-shape");
  int64_t params = 0;
  for (const auto& e : models::qwen2_vl::expected_tensors(b, true)) params += shape_numel(e.shape);
  EXPECT_EQ(params, 2'208'985'600);  // Qwen2-VL-2B
}

// ---- the checker's failure report --------------------------------------------------------------

class CheckerFailures : public ::testing::Test {
 protected:
  void SetUp() override {
    models::qwen2_vl::make_tiny_checkpoint(good_.path().string(), {});
    cfg_ = models::qwen2_vl::load_config(good_.file("config.json"));
    io::SafeTensors st = io::SafeTensors::open(good_.path().string());
    for (const auto& n : st.names()) tensors_.emplace_back(n, st.get(n).clone());
  }
  std::string check_error() {
    io::write_checkpoint(bad_.path().string(), tensors_, 1ull << 40);
    io::SafeTensors st = io::SafeTensors::open(bad_.path().string());
    return error_of<FormatError>([&] { models::qwen2_vl::check_checkpoint(st, cfg_); });
  }
  void erase(const std::string& name) {
    std::erase_if(tensors_, [&](const auto& p) { return p.first == name; });
  }
  TempDir good_{"tiny"}, bad_{"tiny"};
  models::qwen2_vl::Config cfg_;
  io::NamedTensors tensors_;
};

TEST_F(CheckerFailures, MissingTensors) {
  erase("model.layers.1.self_attn.k_proj.bias");
  erase("visual.blocks.0.norm2.weight");
  std::string msg = check_error();
  EXPECT_THAT(msg, HasSubstr(bad_.path().string()));
  EXPECT_THAT(msg, HasSubstr("2 missing (model.layers.1.self_attn.k_proj.bias, "
                             "visual.blocks.0.norm2.weight)"));
}

TEST_F(CheckerFailures, UnexpectedTensor) {
  tensors_.emplace_back("model.layers.2.mlp.up_proj.weight", Tensor::zeros(DType::kBF16, {1}));
  EXPECT_THAT(check_error(), HasSubstr("1 unexpected (model.layers.2.mlp.up_proj.weight)"));
}

TEST_F(CheckerFailures, WrongShape) {
  for (auto& [n, t] : tensors_)
    if (n == "visual.merger.mlp.2.weight") t = Tensor::zeros(DType::kBF16, {32, 128});
  EXPECT_THAT(check_error(), HasSubstr("1 with the wrong shape (visual.merger.mlp.2.weight is "
                                       "[32, 128], expected [64, 128])"));
}

TEST_F(CheckerFailures, UnsupportedDtype) {
  for (auto& [n, t] : tensors_)
    if (n == "model.norm.weight") t = Tensor::zeros(DType::kI32, {64});
  EXPECT_THAT(check_error(), HasSubstr("1 with an unsupported dtype (need F32, F16 or BF16) "
                                       "(model.norm.weight is I32)"));
}

TEST_F(CheckerFailures, ManyProblemsAreCountedAndTruncated) {
  for (int l = 0; l < 2; ++l)
    for (const char* p : {"q_proj.weight", "q_proj.bias", "k_proj.weight", "v_proj.weight"})
      erase("model.layers." + std::to_string(l) + ".self_attn." + p);
  std::string msg = check_error();
  EXPECT_THAT(msg, HasSubstr("8 missing ("));
  EXPECT_THAT(msg, HasSubstr(", ...)"));
}

// ---- the real CLI ------------------------------------------------------------------------------

TEST(InspectCli, GoodAndCorruptedCheckpoint) {
  TempDir dir("tiny");
  TinyOptions o;
  o.max_shard_bytes = 300'000;
  models::qwen2_vl::make_tiny_checkpoint(dir.path().string(), o);
  std::string out;
  int rc =
      testing::run_command(std::string(MMRT_CLI_PATH) + " inspect " + dir.path().string(), &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("Qwen2VLForConditionalGeneration"));
  EXPECT_THAT(out, HasSubstr("hidden 64, layers 2, heads 4 (head_dim 16), kv heads 2"));
  EXPECT_THAT(out, HasSubstr("depth 2, embed 32, heads 2 (head_dim 16)"));
  EXPECT_THAT(out, HasSubstr("naming        old"));
  EXPECT_THAT(out, HasSubstr("separate (untied)"));
  EXPECT_THAT(out, HasSubstr("tokenizer     1014 tokens"));
  EXPECT_THAT(out, HasSubstr("load time"));
  io::SafeTensors st = io::SafeTensors::open(dir.path().string());
  EXPECT_THAT(out, HasSubstr("tensors       " + std::to_string(st.size())));
  EXPECT_THAT(out, HasSubstr("shards        " + std::to_string(st.files().size())));

  // Corrupt the second shard's header: declare a header longer than the file.
  const std::string shard = st.files()[1];
  std::string bytes = testing::read_bytes(shard);
  bytes.replace(0, 8, testing::le64(bytes.size() + 100));
  testing::write_bytes(shard, bytes);
  rc = testing::run_command(std::string(MMRT_CLI_PATH) + " inspect " + dir.path().string(), &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr(shard));
  EXPECT_THAT(out, HasSubstr("runs past the end of the file"));
  EXPECT_THAT(out, HasSubstr("format_error"));

  rc = testing::run_command(std::string(MMRT_CLI_PATH) + " inspect --help", &out);
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, HasSubstr("usage: mmrt inspect DIR"));
}

// The registry picks the family from config.json; another architecture is refused by name, with
// the supported ones listed, by inspect and generate alike.
TEST(InspectCli, UnsupportedArchitectureListsTheSupportedOnes) {
  TempDir dir("arch");
  TinyOptions o;
  models::qwen2_vl::make_tiny_checkpoint(dir.path().string(), o);
  const fs::path cfg = dir.path() / "config.json";
  json j = json::parse(testing::read_bytes(cfg.string()));
  j["architectures"] = {"MambaForCausalLM"};
  j["model_type"] = "mamba";
  testing::write_bytes(cfg.string(), j.dump());
  for (const std::string& cmd : {" inspect " + dir.path().string(),
                                 " generate --quiet --prompt hi --model " + dir.path().string()}) {
    std::string out;
    const int rc = testing::run_command(std::string(MMRT_CLI_PATH) + cmd, &out);
    EXPECT_EQ(rc, 1) << cmd << ": " << out;
    EXPECT_THAT(out, HasSubstr("architecture \"MambaForCausalLM\" is not supported"));
    EXPECT_THAT(out, HasSubstr("supported: Qwen2VLForConditionalGeneration (qwen2-vl)"));
    EXPECT_THAT(out, HasSubstr("unimplemented"));
  }
}

}  // namespace
}  // namespace mmrt
