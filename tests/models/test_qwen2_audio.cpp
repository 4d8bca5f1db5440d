// Qwen2-Audio against the independent PyTorch / numpy reference written from the HF definition
// (tests/reference/qwen2_audio_ref.py) on tiny random checkpoints written by make-tiny-model:
// the audio tower (kept rows; every row of a short clip, padded queries included, under the key
// mask), the whole model's last-token logits and greedy tokens with audio, the token count per
// clip length, a long clip split into windows, kRefuse, the file -> features path, and the chat
// template against jinja2.
//
// Tolerances, relative to the largest reference value: f32 weights (+ f32 KV) 1e-4; bf16 weights
// (+ bf16 KV) 4e-2 (bf16 has 8 mantissa bits and the GEMMs round activations to bf16); the
// log-mel 1e-4 absolute (float64 against the numpy float64 path). Greedy tokens identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "audio_test_util.h"
#include "batch_runner.h"
#include "core/error.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "media/image.h"
#include "models/qwen2_audio/audio_tower.h"
#include "models/qwen2_audio/chat_template.h"
#include "models/qwen2_audio/feature_extractor.h"
#include "models/qwen2_audio/tiny_checkpoint.h"
#include "ref_test_util.h"
#include "test_model.h"

namespace fs = std::filesystem;
using namespace mmrt;
using namespace mmrt::models;
using json = nlohmann::json;

namespace {

std::string audio_ref(const std::string& args) {
  return test::run_ref("qwen2_audio_ref.py", args);
}

const auto read_bytes = test::file_bytes;

using test::csv;

using test::Diff;
using test::diff;
using test::report;

// A tiny checkpoint, and the reference's log-mel windows of generated clips.
struct World {
  fs::path dir;
  std::shared_ptr<void> cleanup;
  qwen2_audio::Config cfg;
  qwen2_audio::FeatureExtractorConfig fe;

  World(DType dtype, const std::string& tag, uint64_t seed = 7) {
    dir = fs::temp_directory_path() / ("mmrt_audio_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    cleanup = std::shared_ptr<void>(nullptr, [d = dir](void*) { fs::remove_all(d); });
    qwen2_audio::TinyOptions o;
    o.dtype = dtype;
    o.seed = seed;
    const auto r = qwen2_audio::make_tiny_checkpoint((dir / "m").string(), o);
    cfg = r.config;
    fe = r.features;
  }
  std::string model() const { return (dir / "m").string(); }
  // Rewrites config.json with another encoder head count (the weights do not depend on it):
  // 2 heads of d_model 32 give head_dim 16, the kernel's own tile (no padded heads).
  void set_encoder_heads(int64_t heads) {
    const fs::path p = dir / "m" / "config.json";
    json j = json::parse(std::ifstream(p));
    j["audio_config"]["encoder_attention_heads"] = heads;
    std::ofstream(p) << j.dump(2);
    cfg.audio.encoder_attention_heads = heads;
  }

  // The item the processor would prepare from a clip of n samples, features from the reference.
  struct Clip {
    fs::path wav, mel;
    PreparedMedia item;
  };
  Clip clip(int64_t n, uint32_t seed, bool split = true) const {
    Clip c;
    const std::string name = "clip" + std::to_string(n) + "_" + std::to_string(seed);
    c.wav = dir / (name + ".wav");
    c.mel = dir / (name + ".npy");
    test::write_wav(c.wav, n, seed);
    const json frames =
        json::parse(audio_ref("features --model " + model() + " --wav " + c.wav.string() +
                              " --out " + c.mel.string() + (split ? " --split" : "")));
    c.item.modality = Modality::kAudio;
    c.item.features = io::read_npy(c.mel.string());
    c.item.dims = {fe.feature_size, fe.n_frames()};
    for (const auto& L : frames) {
      c.item.dims.push_back(L.get<int64_t>());
      c.item.n_tokens += qwen2_audio::audio_tokens(L.get<int64_t>());
    }
    c.item.encoder_cost = static_cast<int64_t>(frames.size()) * fe.n_frames() / 2;
    return c;
  }
  std::string frames_arg(const PreparedMedia& item) const {
    return csv(std::vector<int64_t>(item.dims.begin() + 2, item.dims.end()));
  }
};

std::unique_ptr<qwen2_audio::AudioTower> load_tower(const World& w,
                                                    const models::EncoderPrecision& f) {
  const io::SafeTensors st = io::SafeTensors::open(w.model());
  return qwen2_audio::AudioTower::load(test::test_backend(), st, w.cfg, f);
}

// A reference mode that writes an .npy (`--out` appended), read back.
Tensor ref_tensor(const World& w, const std::string& args) {
  const std::string out = (w.dir / "ref_out.npy").string();
  audio_ref(args + " --out " + out);
  return io::read_npy(out);
}

std::string tower_args(const World& w, const World::Clip& c) {
  return "tower --model " + w.model() + " --mel " + c.mel.string() + " --frames " +
         w.frames_arg(c.item);
}

// The tower on every window of a clip (rows concatenated) vs the reference (`ref_extra`: more
// arguments to its tower mode).
Diff tower_diff(const World& w, const models::EncoderPrecision& prec, const World::Clip& c,
                const std::string& ref_extra = "") {
  auto tower = load_tower(w, prec);
  const int64_t H = w.cfg.text.hidden_size, per_window = w.fe.feature_size * w.fe.n_frames();
  Tensor got = Tensor::empty(DType::kF32, {c.item.n_tokens, H});
  int64_t row = 0;
  for (int64_t k = 0; k < c.item.features.dim(0); ++k) {
    const Tensor t = test::host(tower->forward(
        {c.item.features.data<float>() + k * per_window, static_cast<size_t>(per_window)},
        c.item.dims[static_cast<size_t>(2 + k)]));
    EXPECT_LE(row + t.dim(0), c.item.n_tokens);
    if (row + t.dim(0) > c.item.n_tokens) break;
    std::memcpy(got.data<float>() + row * H, t.raw(), t.nbytes());
    row += t.dim(0);
  }
  EXPECT_EQ(row, c.item.n_tokens);
  return diff(got, ref_tensor(w, tower_args(w, c) + ref_extra));
}

}  // namespace

TEST(Qwen2Audio, TowerMatchesReferenceF32) {
  World w(DType::kF32, "tower32");
  // A full 30 s window, 2.5 s, and 805 samples (6 mel frames, 1 token); head_dim 8 (heads padded
  // to the kernel's 16) and 16 (the kernel reads the fused q/k/v rows directly).
  const World::Clip clips[] = {w.clip(480000, 3), w.clip(40000, 3), w.clip(805, 3)};
  for (int64_t heads : {4, 2}) {
    if (heads != w.cfg.audio.encoder_attention_heads) w.set_encoder_heads(heads);
    for (const World::Clip& c : clips) {
      const std::string what = "tower f32, " + std::to_string(c.item.dims[2]) + " frames, " +
                               "head_dim " + std::to_string(w.cfg.audio.head_dim());
      SCOPED_TRACE(what);
      const Diff d = tower_diff(w, kernels::WeightFormat::kF32, c);
      report(what.c_str(), d);
      EXPECT_LE(d.rel(), 1e-4);
    }
  }
}

TEST(Qwen2Audio, TowerMatchesReferenceBF16) {
  World w(DType::kBF16, "tower16");
  const Diff d = tower_diff(w, kernels::WeightFormat::kBF16, w.clip(40000, 4));
  report("tower bf16, 250 frames", d);
  EXPECT_LE(d.rel(), 4e-2);
}

// The int8 blocks (layer 0 of 2 in int8, x per row, integer sums; the rest f32) against the
// reference that quantises the same way, and an order of magnitude closer to it than the
// quantisation's own effect (the reference without it).
TEST(Qwen2Audio, TowerInt8LayersMatchTheQuantisedReference) {
  World w(DType::kF32, "tower8");
  std::string why;
  const std::optional<models::EncoderPrecision> int8 = test::int8_encoder(1, why);
  if (!int8) GTEST_SKIP() << why;  // no integer GEMM on this CPU
  const models::EncoderPrecision& prec = *int8;
  const World::Clip c = w.clip(40000, 4);
  const std::string q = test::int8_ref_args("--int8-layers", 1, prec);
  const Diff impl = tower_diff(w, prec, c, q);
  const Diff effect = diff(ref_tensor(w, tower_args(w, c)), ref_tensor(w, tower_args(w, c) + q));
  report("audio int8 layer 0 against the quantised reference", impl);
  report("audio int8 layer 0: the quantisation's own effect", effect);
  EXPECT_LE(impl.rel(), 1e-5);
  EXPECT_LE(impl.rel(), 0.1 * effect.rel());
  EXPECT_GT(effect.rel(), 3e-5) << "layer 0 was not quantised in the reference";
}

// HF masks keys >= (L - 1) // 2 + 1 for every query, computes the padded queries anyway and
// pools all 750 rows: forward_all equals the reference on every row, and forward's kept rows
// (computed over the valid rows only) equal forward_all's.
TEST(Qwen2Audio, KeyPaddingMaskOnAShortClip) {
  World w(DType::kF32, "mask");
  const World::Clip c = w.clip(24000, 5, false);  // 1.5 s: 150 frames, 75 valid rows of 1500
  const std::span<const float> mel(c.item.features.data<float>(),
                                   static_cast<size_t>(c.item.features.numel()));
  const int64_t L = c.item.dims[2];
  ASSERT_EQ(L, 150);
  const std::string all_args = "tower --all --model " + w.model() + " --mel " + c.mel.string() +
                               " --frames " + std::to_string(L);
  for (int64_t heads : {4, 2}) {  // head_dim 8 and 16
    if (heads != w.cfg.audio.encoder_attention_heads) w.set_encoder_heads(heads);
    SCOPED_TRACE(std::to_string(heads) + " heads");
    auto tower = load_tower(w, kernels::WeightFormat::kF32);
    const Tensor all = test::host(tower->forward_all(mel, L));  // [750, hidden]
    ASSERT_EQ(all.dim(0), w.cfg.audio.max_source_positions / 2);
    const Diff d = diff(all, ref_tensor(w, all_args));
    report(("every row under the key mask, head_dim " + std::to_string(w.cfg.audio.head_dim()))
               .c_str(),
           d);
    EXPECT_LE(d.rel(), 1e-4);
    const Tensor kept = test::host(tower->forward(mel, L));
    ASSERT_EQ(kept.dim(0), qwen2_audio::audio_tokens(L));
    EXPECT_LE(diff(kept, all.slice(0, 0, kept.dim(0)).contiguous()).rel(), 1e-5);
    EXPECT_THROW(tower->forward_all(mel, 0), InvalidArgument);
    EXPECT_THROW(tower->forward(mel.first(10), L), InvalidArgument);
  }
}

TEST(Qwen2Audio, TokenCountMatchesHfProcessor) {
  const std::vector<int64_t> lengths{0,   1,    159,   160,   161,    320,    321,    480,   640,
                                     641, 1280, 16000, 40000, 479999, 480000, 480001, 960000};
  const json want =
      json::parse(audio_ref("tokens --hop 160 --n-samples 480000 --samples " + csv(lengths)));
  ASSERT_EQ(want.size(), lengths.size());
  qwen2_audio::FeatureExtractorConfig fe;  // 16 kHz, hop 160, 480000 samples
  for (size_t i = 0; i < lengths.size(); ++i) {
    SCOPED_TRACE(std::to_string(lengths[i]) + " samples");
    const int64_t L = qwen2_audio::valid_frames(fe, lengths[i]);
    EXPECT_EQ(L, want[i][0].get<int64_t>());
    EXPECT_EQ(qwen2_audio::audio_tokens(L), want[i][1].get<int64_t>());
  }
  EXPECT_EQ(qwen2_audio::audio_tokens(3000), 750);
}

// The whole model on an audio + text prompt: last-token logits of a chunked prefill (the audio
// rows split across chunks) and 24 greedy tokens, f32 and bf16.
class Qwen2AudioModel : public ::testing::TestWithParam<DType> {};

TEST_P(Qwen2AudioModel, LogitsAndGreedyTokensMatchReference) {
  const DType dt = GetParam();
  const double tol = dt == DType::kF32 ? 1e-4 : 4e-2;
  World w(dt, dt == DType::kF32 ? "lm32" : "lm16");
  const World::Clip c = w.clip(37000, 8);  // 2.3 s: 58 tokens
  test::TestModelOptions mo;
  mo.kv_dtype = dt;
  mo.kv_blocks = 64;
  auto lm = test::load_test_model(w.model(), mo);
  const io::Tokenizer tok = io::Tokenizer::from_file(w.model() + "/tokenizer.json");
  ChatMessage user;
  user.role = "user";
  user.content = {{ContentPart::Kind::kAudio, ""}, {ContentPart::Kind::kText, "What is it?"}};
  const std::vector<int32_t> ids = tok.encode(lm->processor().render_chat({user}, true));
  const ExpandedPrompt p = lm->processor().expand(ids, {&c.item, 1});
  ASSERT_EQ(p.spans.size(), 1u);
  ASSERT_EQ(p.spans[0].n_tokens, c.item.n_tokens);
  EXPECT_TRUE(p.positions.empty());
  const Tensor feats = lm->runner().encode(c.item);  // [n_tokens, hidden]
  std::vector<int32_t> rows;
  for (int64_t k = 0; k < c.item.n_tokens; ++k)
    rows.push_back(static_cast<int32_t>(p.spans[0].begin + k));
  const fs::path ids_file = w.dir / "ids.txt";
  {
    std::vector<int64_t> v(p.ids.begin(), p.ids.end());
    std::ofstream(ids_file) << csv(v);
  }
  const std::string args = " --model " + w.model() + " --ids @" + ids_file.string() + " --mel " +
                           c.mel.string() + " --frames " + w.frames_arg(c.item);

  // Chunked prefill, 13 tokens a step.
  std::vector<int32_t> blocks{5, 2, 7, 0, 3, 1, 6, 4, 8, 9};
  const Tensor logits = test::chunked_prefill(*lm, p.ids, rows, feats, 13, blocks);
  const Tensor want = ref_tensor(w, "logits" + args);  // [vocab]
  const Diff d = diff(logits.data<float>(), want.data<float>(), want.numel());
  ASSERT_EQ(want.numel(), logits.dim(1));
  report((std::string(dtype_name(dt)) + " last-token logits").c_str(), d);
  EXPECT_LE(d.rel(), tol);

  engine::TextRequest r;
  r.prompt = p.ids;
  r.embed_rows = rows;
  r.embeds = feats;
  r.sampling.max_tokens = 24;
  r.sampling.ignore_eos = true;
  engine::BatchRunnerOptions bo;
  bo.step_token_budget = 17;
  const auto got = engine::run_text_batch(*lm, tok, {r}, bo)[0].tokens;
  const auto greedy =
      json::parse(audio_ref("generate" + args + " --max-new 24")).get<std::vector<int32_t>>();
  EXPECT_EQ(got, greedy);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Qwen2AudioModel, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// A 70 s clip: three windows (30 s, 30 s, 10 s) encoded independently and concatenated, as the
// reference encodes the same split; the preprocessed features of the file equal the reference's
// log-mel; kRefuse names both durations.
TEST(Qwen2Audio, LongClipSplitIntoWindows) {
  World w(DType::kF32, "long");
  const int64_t n = 70 * 16000;
  const World::Clip c = w.clip(n, 9);
  ASSERT_EQ(c.item.dims.size(), 5u);
  EXPECT_EQ(c.item.dims[2], 3000);
  EXPECT_EQ(c.item.dims[3], 3000);
  EXPECT_EQ(c.item.dims[4], 1000);
  EXPECT_EQ(c.item.n_tokens, 750 + 750 + 250);
  auto lm = test::load_test_model(w.model(), {});
  const Tensor got = test::host(lm->runner().encode(c.item));
  ASSERT_EQ(got.dim(0), c.item.n_tokens);
  const Diff enc = diff(got, ref_tensor(w, tower_args(w, c)));
  report("70 s clip, 3 windows, encoder rows", enc);
  EXPECT_LE(enc.rel(), 1e-4);
  // The engine runs it a layer a step, window after window: the same bits.
  test::expect_parts_equal_encode(lm->runner(), c.item, got, 3 * (2 + 1));

  // The file through the processor: the same windows, the same features.
  const std::vector<uint8_t> bytes = read_bytes(c.wav);
  const PreparedMedia prep = lm->processor().preprocess(Modality::kAudio, bytes, {});
  EXPECT_EQ(prep.dims, c.item.dims);
  EXPECT_EQ(prep.n_tokens, c.item.n_tokens);
  EXPECT_EQ(prep.encoder_cost, 3 * 1500);
  const Diff mel = diff(prep.features, c.item.features);
  report("log-mel of the 70 s file vs numpy float64", mel);
  EXPECT_GT(mel.max_ref, 0.5);  // not a degenerate comparison
  EXPECT_LE(mel.max_abs, 1e-4);
  const MediaEstimate e = lm->processor().estimate(Modality::kAudio, bytes);
  EXPECT_TRUE(e.exact);
  EXPECT_EQ(e.dims, prep.dims);
  EXPECT_EQ(e.n_tokens, prep.n_tokens);
  EXPECT_EQ(e.encoder_cost, prep.encoder_cost);
  EXPECT_EQ(e.feature_bytes, static_cast<int64_t>(prep.features.nbytes()));

  LoadOptions refuse;
  refuse.long_audio = LoadOptions::LongAudio::kRefuse;
  const Model strict = load_model(test::test_backend(), w.model(), refuse);
  for (int pass = 0; pass < 2; ++pass) {
    try {
      if (pass == 0)
        strict.processor->estimate(Modality::kAudio, bytes);
      else
        strict.processor->preprocess(Modality::kAudio, bytes, {});
      ADD_FAILURE() << "a 70 s clip was accepted with long_audio = refuse";
    } catch (const InvalidArgument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("70.00 s"), std::string::npos) << m;
      EXPECT_NE(m.find("30.00 s"), std::string::npos) << m;
    }
  }
  // A clip of exactly one window is not long.
  const World::Clip one = w.clip(480000, 10);
  EXPECT_EQ(strict.processor->preprocess(Modality::kAudio, read_bytes(one.wav), {}).n_tokens, 750);
}

// The file -> features path on a short clip: estimate == preprocess, features == the reference's
// log-mel, and the encoder on them == the reference tower.
TEST(Qwen2Audio, FileToFeaturesMatchesReference) {
  World w(DType::kF32, "file");
  const World::Clip c = w.clip(40000, 11);
  auto lm = test::load_test_model(w.model(), {});
  const std::vector<uint8_t> bytes = read_bytes(c.wav);
  const MediaEstimate e = lm->processor().estimate(Modality::kAudio, bytes);
  const PreparedMedia prep = lm->processor().preprocess(Modality::kAudio, bytes, {});
  EXPECT_EQ(e.dims, prep.dims);
  EXPECT_EQ(e.n_tokens, 62);  // 250 frames -> 125 rows -> 62 tokens
  EXPECT_EQ(prep.dims, c.item.dims);
  const Diff mel = diff(prep.features, c.item.features);
  report("log-mel of the 2.5 s file vs numpy float64", mel);
  EXPECT_LE(mel.max_abs, 1e-4);
  const Diff enc = diff(test::host(lm->runner().encode(prep)), ref_tensor(w, tower_args(w, c)));
  report("2.5 s file, encoder rows", enc);
  EXPECT_LE(enc.rel(), 1e-4);
}

TEST(Qwen2Audio, ChatTemplateMatchesJinja) {
  using K = ContentPart::Kind;
  auto msg = [](std::string role, std::vector<ContentPart> parts) {
    ChatMessage m;
    m.role = std::move(role);
    m.content = std::move(parts);
    return m;
  };
  const std::vector<std::vector<ChatMessage>> cases = {
      {ChatMessage::text("user", "Hello!")},
      {msg("user", {{K::kAudio, ""}, {K::kText, "What's that sound?"}})},
      {ChatMessage::text("system", "Be terse."),
       msg("user", {{K::kText, "Compare "}, {K::kAudio, ""}, {K::kText, " and "}, {K::kAudio, ""}}),
       ChatMessage::text("assistant", "The first is louder."),
       msg("user", {{K::kAudio, ""}, {K::kText, "And this one?\nTwo lines, 你好 🙂"}})},
      {msg("user", {{K::kAudio, ""}})},
  };
  json requests = json::array();
  std::vector<std::string> got;
  for (bool gen : {true, false})
    for (const auto& conv : cases) {
      json msgs = json::array();
      for (const auto& m : conv) {
        json parts = json::array();
        for (const auto& p : m.content)
          parts.push_back(p.kind == K::kText ? json{{"type", "text"}, {"text", p.text}}
                                             : json{{"type", "audio"}, {"audio_url", "a.wav"}});
        msgs.push_back({{"role", m.role}, {"content", parts}});
      }
      requests.push_back({{"messages", msgs}, {"add_generation_prompt", gen}});
      got.push_back(qwen2_audio::render_chat(conv, gen));
    }
  const fs::path in = fs::temp_directory_path() / ("mmrt_achat_" + std::to_string(::getpid()));
  std::ofstream(in) << requests.dump();
  const json want = json::parse(audio_ref("chat < " + in.string()));
  // The template make-tiny-model writes into tokenizer_config.json, rendered by jinja2 too.
  World w(DType::kBF16, "chat");
  const json written = json::parse(audio_ref("chat --model " + w.model() + " < " + in.string()));
  fs::remove(in);
  ASSERT_EQ(want.size(), got.size());
  ASSERT_EQ(written.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], want[i].get<std::string>()) << i;
    EXPECT_EQ(got[i], written[i].get<std::string>()) << i;
  }
}
