// Qwen2-Audio without a reference process (release and ASan+UBSan): config.json and
// preprocessor_config.json parsing and validation (every bad value named), the token count and
// window plan, the registry, the tiny checkpoints (both presets load and encode), the processor's
// placeholder expansion, estimates and keys, and the runner's input checks.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "audio_test_util.h"
#include "core/error.h"
#include "io/tokenizer.h"
#include "media/image.h"
#include "media/mel.h"
#include "models/qwen2_audio/config.h"
#include "models/qwen2_audio/feature_extractor.h"
#include "models/qwen2_audio/tiny_checkpoint.h"
#include "models/registry.h"
#include "models/tiny_registry.h"
#include "test_model.h"

namespace fs = std::filesystem;
using namespace mmrt;
using namespace mmrt::models;
using namespace mmrt::models::qwen2_audio;
using json = nlohmann::json;

namespace {

// Qwen2-Audio-7B-Instruct's config.json: a sparse text_config on Qwen2Config defaults.
const char* kPublishedConfig = R"({
  "architectures": ["Qwen2AudioForConditionalGeneration"],
  "audio_config": {"activation_function": "gelu", "d_model": 1280, "encoder_attention_heads": 20,
                   "encoder_ffn_dim": 5120, "encoder_layers": 32, "max_source_positions": 1500,
                   "model_type": "qwen2_audio_encoder", "num_mel_bins": 128,
                   "scale_embedding": false},
  "audio_token_index": 151646, "ignore_index": -100, "model_type": "qwen2_audio",
  "text_config": {"bos_token_id": 151643, "eos_token_id": 151645, "intermediate_size": 11008,
                  "max_position_embeddings": 8192, "model_type": "qwen2", "rms_norm_eps": 1e-05,
                  "rope_theta": 10000, "torch_dtype": "bfloat16", "use_mrope": false,
                  "vocab_size": 156032},
  "torch_dtype": "bfloat16", "vocab_size": 156032})";

// Validation of the published config with one field changed: the error names the field.
void expect_bad(const std::function<void(json&)>& edit, const std::string& field) {
  json j = json::parse(kPublishedConfig);
  edit(j);
  try {
    parse_config(j.dump(), "config.json").validate("config.json");
    ADD_FAILURE() << "accepted a config with a bad " << field;
  } catch (const Error& e) {  // FormatError, or Unimplemented for a feature the runtime lacks
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

fs::path temp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("mmrt_qa_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

std::vector<uint8_t> wav_bytes(const fs::path& dir, int64_t n) {
  const fs::path p = dir / ("a" + std::to_string(n) + ".wav");
  test::write_wav(p, n, 1);
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class Qwen2AudioTiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = temp_dir("tiny");
    TinyOptions o;
    o.dtype = DType::kF32;
    o.seed = 2;
    result_ = new TinyResult(make_tiny_checkpoint((dir_ / "m").string(), o));
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
    delete result_;
  }
  static std::string model() { return (dir_ / "m").string(); }
  static fs::path dir_;
  static TinyResult* result_;
};
fs::path Qwen2AudioTiny::dir_;
TinyResult* Qwen2AudioTiny::result_ = nullptr;

}  // namespace

TEST(Qwen2AudioConfig, PublishedConfigUsesQwen2Defaults) {
  const Config c = parse_config(kPublishedConfig, "config.json");
  c.validate("config.json");
  EXPECT_EQ(c.text.hidden_size, 4096);
  EXPECT_EQ(c.text.num_hidden_layers, 32);
  EXPECT_EQ(c.text.num_attention_heads, 32);
  EXPECT_EQ(c.text.num_key_value_heads, 32);  // plain multi-head attention
  EXPECT_EQ(c.text.intermediate_size, 11008);
  EXPECT_EQ(c.text.vocab_size, 156032);
  EXPECT_EQ(c.text.max_position_embeddings, 8192);
  EXPECT_EQ(c.text.rope_theta, 10000.0);
  EXPECT_FALSE(c.text.tie_word_embeddings);
  EXPECT_EQ(c.audio.n_frames(), 3000);
  EXPECT_EQ(c.audio.head_dim(), 64);
  EXPECT_EQ(c.audio_token_index, 151646);
  EXPECT_EQ(tensor_name("model.layers.0.mlp.up_proj.weight"),
            "language_model.model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(tensor_name("lm_head.weight"), "language_model.lm_head.weight");
  EXPECT_EQ(tensor_name("audio_tower.conv1.weight"), "audio_tower.conv1.weight");
  // Round trip through the writer.
  const Config back = parse_config(config_to_json(c), "written");
  EXPECT_EQ(back.text.num_key_value_heads, 32);
  EXPECT_EQ(back.audio.encoder_ffn_dim, 5120);
  // Absent sub-configs are the class defaults; audio_token_id is accepted as an alias.
  const Config bare = parse_config(R"({"model_type": "qwen2_audio", "audio_token_id": 7})", "c");
  EXPECT_EQ(bare.audio.d_model, 1280);
  EXPECT_EQ(bare.text.hidden_size, 4096);
  EXPECT_EQ(bare.audio_token_index, 7);
}

TEST(Qwen2AudioConfig, BadValuesAreNamed) {
  expect_bad([](json& j) { j["audio_config"]["d_model"] = 0; }, "audio_config.d_model");
  expect_bad([](json& j) { j["audio_config"]["encoder_attention_heads"] = 7; },
             "audio_config.d_model");
  expect_bad([](json& j) { j["audio_config"]["encoder_layers"] = 1 << 20; },
             "audio_config.encoder_layers");
  expect_bad([](json& j) { j["audio_config"]["max_source_positions"] = 1501; },
             "audio_config.max_source_positions");
  expect_bad([](json& j) { j["audio_config"]["num_mel_bins"] = -1; }, "audio_config.num_mel_bins");
  expect_bad([](json& j) { j["audio_config"]["activation_function"] = "relu"; },
             "audio_config.activation_function");
  expect_bad([](json& j) { j["audio_config"]["d_model"] = "1280"; }, "audio_config.d_model");
  expect_bad([](json& j) { j["text_config"]["num_key_value_heads"] = 5; },
             "text_config.num_attention_heads");
  expect_bad([](json& j) { j["text_config"]["hidden_size"] = 4000; }, "text_config.hidden_size");
  expect_bad([](json& j) { j["text_config"]["vocab_size"] = int64_t{1} << 40; },
             "text_config.vocab_size");
  expect_bad([](json& j) { j["text_config"]["rms_norm_eps"] = 0; }, "text_config.rms_norm_eps");
  expect_bad([](json& j) { j["text_config"]["use_sliding_window"] = true; },
             "text_config.use_sliding_window");
  expect_bad(
      [](json& j) {
        j["text_config"]["rope_scaling"] = {{"type", "yarn"}};
      },
      "text_config.rope_scaling.type");
  expect_bad([](json& j) { j["audio_token_index"] = 200000; }, "audio_token_index");
  expect_bad([](json& j) { j["model_type"] = "qwen2_vl"; }, "model_type");
  expect_bad([](json& j) { j["architectures"] = {"WhisperForConditionalGeneration"}; },
             "WhisperForConditionalGeneration");
  expect_bad([](json& j) { j["text_config"] = 3; }, "text_config");
}

TEST(Qwen2AudioConfig, FeatureExtractorSettings) {
  const FeatureExtractorConfig d = FeatureExtractorConfig::from_json("{}", "pp");
  EXPECT_EQ(d.feature_size, 80);  // the class default
  EXPECT_EQ(d.n_samples, 480000);
  EXPECT_EQ(d.n_frames(), 3000);
  const FeatureExtractorConfig hub = FeatureExtractorConfig::from_json(R"({
    "chunk_length": 30, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128,
    "hop_length": 160, "n_fft": 400, "n_samples": 480000, "nb_max_frames": 3000,
    "padding_side": "right", "padding_value": 0.0, "processor_class": "Qwen2AudioProcessor",
    "return_attention_mask": true, "sampling_rate": 16000})",
                                                                       "pp");
  EXPECT_EQ(hub.feature_size, 128);
  AudioConfig a;
  EXPECT_NO_THROW(hub.check_against(a, "pp"));
  EXPECT_THROW(d.check_against(a, "pp"), FormatError);  // 80 mels for a 128-mel encoder
  const FeatureExtractorConfig tester =
      FeatureExtractorConfig::from_json(R"({"chunk_length": 0.6, "feature_size": 80})", "pp");
  EXPECT_EQ(tester.n_samples, 9600);
  EXPECT_EQ(tester.n_frames(), 60);
  auto bad = [](const std::string& text, const std::string& field) {
    try {
      FeatureExtractorConfig::from_json(text, "pp.json");
      ADD_FAILURE() << "accepted " << text;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  bad(R"({"sampling_rate": 4000})", "sampling_rate");
  bad(R"({"hop_length": 0})", "hop_length");
  bad(R"({"hop_length": 500})", "hop_length");
  bad(R"({"feature_size": 1000})", "feature_size");
  bad(R"({"chunk_length": -1})", "chunk_length");
  bad(R"({"chunk_length": 0.00001})", "chunk_length");
  bad(R"({"n_samples": 48000})", "n_samples");
  bad(R"({"nb_max_frames": 300})", "nb_max_frames");
  bad(R"({"dither": 1e-5})", "dither");
  bad(R"({"padding_value": 1})", "padding_value");
  bad(R"({"feature_extractor_type": "SeamlessM4TFeatureExtractor"})", "feature_extractor_type");
  bad(R"({"n_fft": "400"})", "n_fft");
}

TEST(Qwen2AudioConfig, TokenCountAndWindowPlan) {
  // ((L - 1) // 2 + 1 - 2) // 2 + 1 with floor division.
  const std::pair<int64_t, int64_t> table[] = {{0, 0},    {1, 0},    {2, 0},    {3, 1},
                                               {4, 1},    {5, 1},    {6, 1},    {7, 2},
                                               {100, 25}, {150, 37}, {250, 62}, {3000, 750}};
  for (const auto& [L, n] : table) EXPECT_EQ(audio_tokens(L), n) << L;
  const FeatureExtractorConfig fe;  // 16 kHz, 30 s windows
  // The valid frames agree with the log-mel's own count (media/mel.h), whatever the length.
  media::MelConfig mc;
  mc.n_mels = 128;
  for (int64_t n : {0, 1, 159, 160, 161, 321, 479999, 480000, 480001, 10000000})
    EXPECT_EQ(valid_frames(fe, n), media::mel_valid_frames(mc, n)) << n;
  using LA = LoadOptions::LongAudio;
  // 640 * m samples give m tokens (25 per second).
  EXPECT_EQ(plan_windows(640 * 7, fe, LA::kSplit).n_tokens, 7);
  EXPECT_EQ(plan_windows(480000, fe, LA::kSplit).n_tokens, 750);
  EXPECT_EQ(plan_windows(480000, fe, LA::kRefuse).frames.size(), 1u);
  // Split: consecutive windows, the last partial; a last window too short for a token is dropped.
  const WindowPlan p = plan_windows(2 * 480000 + 16000, fe, LA::kSplit);
  EXPECT_EQ(p.samples, (std::vector<int64_t>{480000, 480000, 16000}));
  EXPECT_EQ(p.frames, (std::vector<int64_t>{3000, 3000, 100}));
  EXPECT_EQ(p.n_tokens, 750 + 750 + 25);
  EXPECT_EQ(plan_windows(480000 + 320, fe, LA::kSplit).frames.size(), 1u);
  EXPECT_EQ(plan_windows(480000 + 321, fe, LA::kSplit).n_tokens, 751);
  // Too short for one token, and long audio refused: both named.
  for (int64_t n : {int64_t{0}, int64_t{320}}) {
    try {
      plan_windows(n, fe, LA::kSplit);
      ADD_FAILURE() << n;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("at least 321 samples"), std::string::npos) << e.what();
    }
  }
  try {
    plan_windows(45 * 16000, fe, LA::kRefuse);
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("45.00 s"), std::string::npos) << m;
    EXPECT_NE(m.find("30.00 s"), std::string::npos) << m;
  }
}

TEST_F(Qwen2AudioTiny, RegistryLoadsTheTinyCheckpoint) {
  EXPECT_STREQ(family_for_checkpoint(model()).name, "qwen2-audio");
  EXPECT_STREQ(family_named("qwen2-audio").name, "qwen2-audio");
  EXPECT_NE(supported_architectures().find("Qwen2AudioForConditionalGeneration (qwen2-audio)"),
            std::string::npos);
  const Model m = load_model(test::test_backend(), model());
  const ModelSpec& s = m.spec;
  const Config& c = result_->config;
  EXPECT_EQ(s.family, "qwen2-audio");
  EXPECT_EQ(s.architecture, "Qwen2AudioForConditionalGeneration");
  EXPECT_EQ(s.position_rows, 1);
  EXPECT_TRUE(s.takes(Modality::kAudio));
  EXPECT_FALSE(s.takes(Modality::kImage));
  EXPECT_EQ(s.embed_dim, 64);
  EXPECT_EQ(s.context_length, 8192);
  ASSERT_EQ(s.kv_layers.size(), 2u);
  EXPECT_EQ(s.kv_layers[0].n_kv_heads, 4);  // MHA
  EXPECT_EQ(s.kv_layers[0].head_dim, 16);
  EXPECT_NE(std::find(s.stop_ids.begin(), s.stop_ids.end(), 151645), s.stop_ids.end());
  EXPECT_NE(std::find(s.stop_ids.begin(), s.stop_ids.end(), 151643), s.stop_ids.end());
  // The trained tokenizer keeps the real special ids.
  const io::Tokenizer tok = io::Tokenizer::from_file(model() + "/tokenizer.json");
  EXPECT_EQ(c.audio_token_index, 151646);
  EXPECT_EQ(tok.encode("<|im_start|><|AUDIO|><|audio_bos|><|audio_eos|><|im_end|><|endoftext|>"),
            (std::vector<int32_t>{151644, 151646, 151647, 151648, 151645, 151643}));
  EXPECT_EQ(c.text.vocab_size, 151680);
  check_tokenizer(tok, s.vocab_size, model());
  // inspect: the family's lines.
  const Inspection ins = family_named("qwen2-audio").inspect(model());
  std::string all;
  for (const auto& [k, v] : ins.lines) all += k + ": " + v + "\n";
  EXPECT_NE(all.find("audio: mels 128, layers 2, d_model 32, heads 4 (head_dim 8), ffn 64"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("750 tokens per full window"), std::string::npos) << all;
  EXPECT_NE(all.find("lm_head: separate (untied)"), std::string::npos) << all;
}

TEST_F(Qwen2AudioTiny, ProcessorExpandsPlaceholders) {
  const auto p = load_processor(model());
  ChatMessage user;
  user.role = "user";
  user.content = {{ContentPart::Kind::kAudio, ""},
                  {ContentPart::Kind::kText, "and"},
                  {ContentPart::Kind::kAudio, ""}};
  const std::string text = p->render_chat({user}, true);
  EXPECT_NE(text.find("Audio 2: <|audio_bos|><|AUDIO|><|audio_eos|>\n"), std::string::npos);
  const io::Tokenizer tok = io::Tokenizer::from_file(model() + "/tokenizer.json");
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151646), 2);
  PreparedMedia a;  // as an estimate gives it: dims and tokens, no features
  a.modality = Modality::kAudio;
  a.dims = {128, 3000, 3000, 100};
  a.n_tokens = 775;
  PreparedMedia b = a;
  b.dims = {128, 3000, 8};
  b.n_tokens = 2;
  const std::vector<PreparedMedia> items{a, b};
  const ExpandedPrompt e = p->expand(ids, items);
  EXPECT_EQ(e.ids.size(), ids.size() - 2 + 775 + 2);
  EXPECT_TRUE(e.positions.empty());
  EXPECT_EQ(e.rope_delta, 0);
  ASSERT_EQ(e.spans.size(), 2u);
  EXPECT_EQ(e.ids[static_cast<size_t>(e.spans[0].begin - 1)], 151647);  // <|audio_bos|>
  EXPECT_EQ(e.ids[static_cast<size_t>(e.spans[0].begin + 775)], 151648);
  EXPECT_EQ(e.spans[1].n_tokens, 2);
  EXPECT_EQ(std::count(e.ids.begin(), e.ids.end(), 151646), 777);
  // Placeholders and items disagree, or an item is malformed.
  EXPECT_THROW(p->expand(ids, {items.data(), 1}), InvalidArgument);
  const std::vector<PreparedMedia> three{a, b, b};
  EXPECT_THROW(p->expand(ids, three), InvalidArgument);
  PreparedMedia lie = b;
  lie.n_tokens = 3;
  EXPECT_THROW(p->expand(ids, std::vector<PreparedMedia>{a, lie}), InvalidArgument);
  PreparedMedia mels = b;
  mels.dims[0] = 80;
  EXPECT_THROW(p->expand(ids, std::vector<PreparedMedia>{a, mels}), InvalidArgument);
  PreparedMedia frames = b;
  frames.dims[2] = 3001;
  EXPECT_THROW(p->expand(ids, std::vector<PreparedMedia>{a, frames}), InvalidArgument);
  PreparedMedia image = b;
  image.modality = Modality::kImage;
  EXPECT_THROW(p->expand(ids, std::vector<PreparedMedia>{a, image}), InvalidArgument);
  // Other modalities and unknown roles.
  const std::vector<uint8_t> none(16, 0);
  EXPECT_THROW(p->estimate(Modality::kImage, none), Unimplemented);
  ChatMessage img = user;
  img.content = {{ContentPart::Kind::kImage, ""}};
  EXPECT_THROW(p->render_chat({img}, true), Unimplemented);
  EXPECT_THROW(p->render_chat({ChatMessage::text("robot", "beep")}, true), InvalidArgument);
}

TEST_F(Qwen2AudioTiny, EstimatePreprocessEncodeAndKeys) {
  const Model m = load_model(test::test_backend(), model());
  const std::vector<uint8_t> clip = wav_bytes(dir_, 24000);  // 1.5 s: 150 frames, 37 tokens
  const MediaEstimate e = m.processor->estimate(Modality::kAudio, clip);
  EXPECT_TRUE(e.exact);
  EXPECT_EQ(e.dims, (std::vector<int64_t>{128, 3000, 150}));
  EXPECT_EQ(e.n_tokens, 37);
  EXPECT_EQ(e.encoder_cost, 1500);
  EXPECT_EQ(e.source_pixels, 24000);
  const PreparedMedia prep = m.processor->preprocess(Modality::kAudio, clip, {});
  EXPECT_EQ(prep.dims, e.dims);
  EXPECT_EQ(prep.n_tokens, e.n_tokens);
  EXPECT_EQ(static_cast<int64_t>(prep.features.nbytes()), e.feature_bytes);
  const Tensor out = m.runner->encode(prep);
  EXPECT_EQ(out.dim(0), 37);
  EXPECT_EQ(out.dim(1), 64);
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_TRUE(std::isfinite(out.data<float>()[i]));
  EXPECT_GT(m.runner->encode_flops(prep), 0.0);
  // Keys follow the bytes.
  std::vector<uint8_t> other = clip;
  other.back() ^= 1;
  EXPECT_EQ(m.processor->content_key(Modality::kAudio, clip),
            m.processor->content_key(Modality::kAudio, clip));
  EXPECT_NE(m.processor->content_key(Modality::kAudio, clip),
            m.processor->content_key(Modality::kAudio, other));
  // Too short, not audio, wrong feature shapes.
  EXPECT_THROW(m.processor->estimate(Modality::kAudio, wav_bytes(dir_, 300)), InvalidArgument);
  EXPECT_THROW(m.processor->preprocess(Modality::kAudio, wav_bytes(dir_, 300), {}),
               InvalidArgument);
  EXPECT_THROW(m.processor->estimate(Modality::kAudio, std::vector<uint8_t>(64, 7)), Error);
  PreparedMedia bad = prep;
  bad.features = Tensor::zeros(DType::kF32, {1, 128, 2999});
  EXPECT_THROW(m.runner->encode(bad), InvalidArgument);
  bad.features = Tensor::zeros(DType::kF32, {2, 128, 3000});
  EXPECT_THROW(m.runner->encode(bad), InvalidArgument);
}

TEST(Qwen2AudioTinyPresets, HfTesterGeometryLoadsAndEncodes) {
  const fs::path d = temp_dir("tester");
  TinyOptions o;
  o.size = parse_tiny_size("hf-tester");
  o.tied = true;
  const TinyResult r = make_tiny_checkpoint(d.string(), o);
  EXPECT_EQ(r.config.audio.d_model, 16);
  EXPECT_EQ(r.config.audio.num_mel_bins, 80);
  EXPECT_EQ(r.features.n_samples, 9600);
  const Model m = load_model(test::test_backend(), d.string());
  const PreparedMedia prep = m.processor->preprocess(Modality::kAudio, wav_bytes(d, 20000), {});
  EXPECT_EQ(prep.dims, (std::vector<int64_t>{80, 60, 60, 60, 5}));  // 9600 + 9600 + 800 samples
  EXPECT_EQ(prep.n_tokens, 15 + 15 + 1);
  EXPECT_EQ(m.runner->encode(prep).dim(0), 31);
  const Inspection ins = family_named("qwen2-audio").inspect(d.string());
  EXPECT_EQ(ins.lines[6].second, "tied to embed_tokens");
  EXPECT_THROW(parse_tiny_size("7b"), InvalidArgument);
  TinyModelOptions naming;
  naming.naming = "new";
  EXPECT_THROW(make_tiny_model(family_named("qwen2-audio"), (d / "x").string(), naming),
               InvalidArgument);
  fs::remove_all(d);
}

TEST_F(Qwen2AudioTiny, MissingTensorFailsAtLoad) {
  const fs::path copy = dir_ / "broken";
  fs::copy(dir_ / "m", copy);
  json cfg = json::parse(std::ifstream(copy / "config.json"));
  cfg["audio_config"]["encoder_layers"] = 3;
  std::ofstream(copy / "config.json") << cfg.dump(2);
  try {
    load_model(test::test_backend(), copy.string());
    ADD_FAILURE() << "loaded a checkpoint missing audio_tower.layers.2";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("audio_tower.layers.2."), std::string::npos) << e.what();
  }
  fs::remove(copy / "preprocessor_config.json");  // class defaults: 80 mels for 128
  EXPECT_THROW(load_model(test::test_backend(), copy.string()), FormatError);
}
