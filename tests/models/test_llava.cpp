// LLaVA-NeXT and LLaVA-1.5 against the independent PyTorch reference written from the HF
// definitions (tests/reference/llava_ref.py) on tiny random checkpoints written by
// make-tiny-model: the CLIP tower + projector + anyres packing on the processor's crops, the
// whole model's last-token logits (chunked prefill, image rows split across chunks, two images
// in one prompt) and greedy tokens, both tensor namings, the processor's token count per image
// size, and the chat templates against jinja2.
//
// Tolerances, relative to the largest reference value: f32 weights (+ f32 KV) 1e-4; bf16 weights
// (+ bf16 KV) 4e-2 (bf16 has 8 mantissa bits and the GEMMs round activations to bf16). Greedy
// tokens identical. The pixels themselves are checked bit-exact against PIL in
// test_llava_image.cpp.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "batch_runner.h"
#include "core/error.h"
#include "io/npy.h"
#include "io/tokenizer.h"
#include "models/llava/chat_template.h"
#include "models/llava/config.h"
#include "models/llava/processor.h"
#include "models/registry.h"
#include "models/tiny_registry.h"
#include "ref_test_util.h"
#include "test_model.h"

namespace fs = std::filesystem;
using namespace mmrt;
using namespace mmrt::models;
using json = nlohmann::json;

namespace {

std::string llava_ref(const std::string& args) {
  return test::run_ref("llava_ref.py", args);
}

using test::Diff;
using test::diff;
using test::report;
const auto read_bytes = test::file_bytes;

// A tiny checkpoint of one family and naming, and images of several aspect ratios.
struct World {
  fs::path dir;
  std::shared_ptr<void> cleanup;
  bool next = true;

  World(const std::string& arch, DType dtype, const std::string& naming, const std::string& tag) {
    next = arch == "llava-next";
    dir = fs::temp_directory_path() / ("mmrt_llava_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    cleanup = std::shared_ptr<void>(nullptr, [d = dir](void*) { fs::remove_all(d); });
    TinyModelOptions o;
    o.dtype = dtype;
    o.seed = 11;
    o.naming = naming;
    make_tiny_model(family_named(arch), model(), o);
    const std::string cmd =
        std::string(MMRT_REF_PYTHON) +
        " -c \"from PIL import Image; import numpy as np; r=np.random.default_rng(5); "
        "[Image.fromarray(r.integers(0,255,(h,w,3),dtype=np.uint8)).save('" +
        dir.string() +
        "/'+n) for n,h,w in [('wide.png',90,300),('tall.jpg',250,110),('square.png',112,112)]]\"";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
  std::string model() const { return (dir / "m").string(); }
  fs::path image(const std::string& name) const { return dir / name; }
};

kernels::WeightFormat format_of(DType d) {
  return d == DType::kF32 ? kernels::WeightFormat::kF32 : kernels::WeightFormat::kBF16;
}

// An image preprocessed by the processor, its crops saved for the reference.
struct Item {
  PreparedMedia media;
  fs::path pixels;
  std::string args() const {
    return " --pixels " + pixels.string() + " --image-size " + std::to_string(media.dims[0]) + "," +
           std::to_string(media.dims[1]);
  }
};
Item prepare(const World& w, const Processor& proc, const std::string& name) {
  Item it;
  it.media = proc.preprocess(Modality::kImage, read_bytes(w.image(name)), {});
  it.pixels = w.dir / (name + ".pixels.npy");
  io::write_npy(it.pixels.string(), it.media.features);
  return it;
}

Tensor ref_tensor(const World& w, const std::string& args) {
  const std::string out = (w.dir / "ref_out.npy").string();
  llava_ref(args + " --out " + out);
  return io::read_npy(out);
}

struct Case {
  const char* arch;
  DType dtype;
  const char* naming;
};

class LlavaModel : public ::testing::TestWithParam<Case> {};

// The encoder on each image: rows, then values, against the reference tower on the same crops.
TEST_P(LlavaModel, EncoderLogitsAndGreedyTokensMatchReference) {
  const Case c = GetParam();
  const double tol = c.dtype == DType::kF32 ? 1e-4 : 4e-2;
  const std::string tag =
      std::string(c.arch) + "_" + std::string(dtype_name(c.dtype)) + "_" + c.naming;
  World w(c.arch, c.dtype, c.naming, tag);
  test::TestModelOptions mo;
  mo.kv_dtype = c.dtype;
  mo.kv_blocks = 128;
  auto lm = test::load_test_model(w.model(), mo);
  EXPECT_EQ(lm->weight_format(), format_of(c.dtype));
  const Processor& proc = lm->processor();
  std::vector<Item> items;
  for (const char* name : {"wide.png", "tall.jpg"}) items.push_back(prepare(w, proc, name));
  std::vector<Tensor> feats;
  for (const Item& it : items) {
    SCOPED_TRACE(it.pixels.string());
    const Tensor got = test::host(lm->runner().encode(it.media));  // [n_tokens, hidden]
    ASSERT_EQ(got.dim(0), it.media.n_tokens);
    const Diff d = diff(got, ref_tensor(w, "tower --model " + w.model() + it.args()));
    report(tag + " encoder, " + std::to_string(it.media.features.dim(0)) + " crops, " +
               std::to_string(it.media.n_tokens) + " tokens",
           d);
    EXPECT_LE(d.rel(), tol);
    feats.push_back(got);
  }
  // The engine runs the tower a layer a step beside the streams: the same bits.
  test::expect_parts_equal_encode(lm->runner(), items[0].media, feats[0], 2 + 1);

  // Two images in one user turn, then a question.
  const io::Tokenizer tok = io::Tokenizer::from_file(w.model() + "/tokenizer.json");
  ChatMessage user;
  user.role = "user";
  user.content = {{ContentPart::Kind::kImage, ""},
                  {ContentPart::Kind::kImage, ""},
                  {ContentPart::Kind::kText, "What differs between them?"}};
  const std::vector<int32_t> ids = tok.encode(proc.render_chat({user}, true));
  ASSERT_EQ(ids[0], 1) << "the prompt starts with BOS";
  std::vector<PreparedMedia> media{items[0].media, items[1].media};
  const ExpandedPrompt p = proc.expand(ids, media);
  ASSERT_EQ(p.spans.size(), 2u);
  EXPECT_TRUE(p.positions.empty());
  std::vector<int32_t> rows;
  Tensor all = Tensor::empty(DType::kF32, {p.spans[0].n_tokens + p.spans[1].n_tokens,
                                           lm->spec().embed_dim});  // [image rows, hidden]
  int64_t r = 0;
  for (size_t k = 0; k < 2; ++k) {
    for (int64_t j = 0; j < p.spans[k].n_tokens; ++j)
      rows.push_back(static_cast<int32_t>(p.spans[k].begin + j));
    std::memcpy(all.data<float>() + r * all.dim(1), feats[k].raw(), feats[k].nbytes());
    r += p.spans[k].n_tokens;
  }
  const fs::path ids_file = w.dir / "ids.txt";
  {
    std::ofstream f(ids_file);
    for (size_t i = 0; i < p.ids.size(); ++i) f << (i ? "," : "") << p.ids[i];
  }
  const std::string args =
      " --model " + w.model() + " --ids @" + ids_file.string() + items[0].args() + items[1].args();

  // Chunked prefill, 29 tokens a step: image runs split across chunks.
  std::vector<int32_t> blocks;
  for (int32_t b = 0; b < 128; ++b) blocks.push_back((b * 37) % 128);
  const int64_t S = static_cast<int64_t>(p.ids.size());
  const Tensor logits = test::chunked_prefill(*lm, p.ids, rows, all, 29, blocks);
  const Tensor want = ref_tensor(w, "logits" + args);  // [vocab]
  ASSERT_EQ(want.numel(), logits.dim(1));
  const Diff d = diff(logits.data<float>(), want.data<float>(), want.numel());
  report(tag + " last-token logits, " + std::to_string(S) + " tokens", d);
  EXPECT_LE(d.rel(), tol);

  engine::TextRequest req;
  req.prompt = p.ids;
  req.embed_rows = rows;
  req.embeds = all;
  req.sampling.max_tokens = 16;
  req.sampling.ignore_eos = true;
  engine::BatchRunnerOptions bo;
  bo.step_token_budget = 23;
  const auto got = engine::run_text_batch(*lm, tok, {req}, bo)[0].tokens;
  const auto greedy =
      json::parse(llava_ref("generate" + args + " --max-new 16")).get<std::vector<int32_t>>();
  EXPECT_EQ(got, greedy);
}

// CLIP's int8 blocks (EncoderPrecision: layer 0 of the 2 the tower runs in int8, x per row,
// integer sums; the rest f32) against the reference that quantises the same way, and an order of
// magnitude closer to it than the quantisation's own effect (the reference without it).
TEST(LlavaTower, Int8LayersMatchTheQuantisedReference) {
  World w("llava", DType::kF32, "new", "int8");
  LoadOptions lo;
  lo.encoder_weights = "int8";
  lo.encoder_keep_last = 1;
  std::string why;
  const std::optional<models::EncoderPrecision> prec = test::int8_encoder(1, why);
  if (!prec) GTEST_SKIP() << why;  // no integer GEMM on this backend
  const Model m = load_model(test::test_backend(), w.model(), lo);
  ASSERT_EQ(m.spec.encoder_blocks, 2);
  EXPECT_EQ(m.spec.encoder_precision,
            prec->int8_scores
                ? "int8 (blocks 0-0, int8 attention scores; the last 1 and the projections f32)"
                : "int8 (blocks 0-0; the last 1 and the projections f32)");
  const Item it = prepare(w, *m.processor, "square.png");
  const Tensor got = test::host(m.runner->encode(it.media));
  const std::string args = "tower --model " + w.model() + it.args();
  const std::string q = test::int8_ref_args("--int8-layers", 1, *prec);
  const Diff impl = diff(got, ref_tensor(w, args + q));
  const Diff effect = diff(ref_tensor(w, args), ref_tensor(w, args + q));
  report("llava int8 layer 0 against the quantised reference", impl);
  report("llava int8 layer 0: the quantisation's own effect", effect);
  EXPECT_LE(impl.rel(), 1e-5);
  EXPECT_LE(impl.rel(), 0.1 * effect.rel());
  EXPECT_GT(effect.rel(), 3e-5) << "layer 0 was not quantised in the reference";
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, LlavaModel,
                         ::testing::Values(Case{"llava-next", DType::kF32, "old"},
                                           Case{"llava-next", DType::kBF16, "old"},
                                           Case{"llava-next", DType::kF32, "new"},
                                           Case{"llava", DType::kF32, "old"},
                                           Case{"llava", DType::kBF16, "new"}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return std::string(std::string(c.arch) == "llava" ? "Llava15"
                                                                             : "LlavaNext") +
                                  "_" + std::string(dtype_name(c.dtype)) + "_" + c.naming;
                         });

// The processor's token count (what admission and the prompt expansion use, from the header
// alone) against HF's processing_llava_next / processing_llava, on sizes around every pinpoint's
// aspect ratio, tiny and huge images; the estimate from a file equals what preprocessing makes.
TEST(LlavaProcessor, TokenCountsMatchHfProcessor) {
  for (const char* arch : {"llava-next", "llava"}) {
    SCOPED_TRACE(arch);
    World w(arch, DType::kBF16, "old", std::string("tokens_") + arch);
    const llava::Config cfg = llava::load_config(w.model() + "/config.json");
    const llava::LayoutParams lp = llava::layout_params(cfg);
    std::vector<std::pair<int64_t, int64_t>> sizes = {
        {1, 1},     {1, 1000},  {1000, 1},  {112, 112}, {111, 113},   {224, 112},   {112, 224},
        {90, 300},  {250, 110}, {480, 640}, {640, 480}, {1080, 1920}, {1920, 1080}, {336, 336},
        {800, 300}, {300, 800}, {337, 673}, {5000, 17}, {17, 5000},   {999, 1001}};
    for (int64_t h = 7; h < 700; h += 61)
      for (int64_t wd = 5; wd < 700; wd += 89) sizes.push_back({h, wd});
    std::string arg;
    for (const auto& [h, wd] : sizes) {
      if (!arg.empty()) arg += ';';
      arg += std::to_string(h) + "," + std::to_string(wd);
    }
    const json want =
        json::parse(llava_ref("tokens --model " + w.model() + " --sizes '" + arg + "'"));
    ASSERT_EQ(want.size(), sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i)
      EXPECT_EQ(llava::image_layout({sizes[i].first, sizes[i].second}, lp).n_tokens,
                want[i].get<int64_t>())
          << sizes[i].first << "x" << sizes[i].second;
    const Model m = load_model(test::test_backend(), w.model());
    for (const char* name : {"wide.png", "tall.jpg", "square.png"}) {
      const std::vector<uint8_t> bytes = read_bytes(w.image(name));
      const MediaEstimate e = m.processor->estimate(Modality::kImage, bytes);
      const PreparedMedia prep = m.processor->preprocess(Modality::kImage, bytes, {});
      EXPECT_TRUE(e.exact);
      EXPECT_EQ(e.dims, prep.dims) << name;
      EXPECT_EQ(e.n_tokens, prep.n_tokens) << name;
      EXPECT_EQ(e.encoder_cost, prep.encoder_cost) << name;
      EXPECT_EQ(e.feature_bytes, static_cast<int64_t>(prep.features.nbytes())) << name;
    }
  }
}

TEST(LlavaProcessor, ChatTemplatesMatchJinja) {
  using K = ContentPart::Kind;
  auto msg = [](std::string role, std::vector<ContentPart> parts) {
    ChatMessage m;
    m.role = std::move(role);
    m.content = std::move(parts);
    return m;
  };
  const std::vector<std::vector<ChatMessage>> cases = {
      {ChatMessage::text("user", "Hello!")},
      {msg("user", {{K::kImage, ""}, {K::kText, "What is shown in this image?"}})},
      {msg("user", {{K::kText, "Compare "}, {K::kImage, ""}, {K::kText, " and "}, {K::kImage, ""}}),
       ChatMessage::text("assistant", "The first is darker."),
       msg("user", {{K::kImage, ""}, {K::kText, "And this one?\nTwo lines, 你好 🙂"}})},
      {ChatMessage::text("system", "Be terse."), msg("user", {{K::kImage, ""}})},
  };
  for (const char* arch : {"llava-next", "llava"}) {
    SCOPED_TRACE(arch);
    const bool next = std::string(arch) == "llava-next";
    const auto format = next ? llava::ChatFormat::kMistral : llava::ChatFormat::kVicuna;
    World w(arch, DType::kBF16, "old", std::string("chat_") + arch);
    const Model m = load_model(test::test_backend(), w.model());
    json batch = json::array();
    std::vector<std::string> got;
    for (bool gen : {true, false})
      for (const auto& conv : cases) {
        json msgs = json::array();
        for (const auto& mm : conv) {
          json parts = json::array();
          for (const auto& p : mm.content)
            parts.push_back(p.kind == K::kText ? json{{"type", "text"}, {"text", p.text}}
                                               : json{{"type", "image"}});
          msgs.push_back({{"role", mm.role}, {"content", parts}});
        }
        batch.push_back({{"messages", msgs}, {"add_generation_prompt", gen}});
        got.push_back(llava::render_chat(format, conv, gen));
        EXPECT_EQ(m.processor->render_chat(conv, gen), got.back());
      }
    const fs::path in = w.dir / "messages.json";
    std::ofstream(in) << json{{"batch", batch}}.dump();
    // The llava-hf template, and the one make-tiny-model wrote into tokenizer_config.json.
    const json hub = json::parse(llava_ref(std::string("chat --template ") +
                                           (next ? "mistral" : "vicuna") + " < " + in.string()));
    const json written = json::parse(
        llava_ref("chat --template " + w.model() + "/tokenizer_config.json < " + in.string()));
    ASSERT_EQ(hub.size(), got.size());
    ASSERT_EQ(written.size(), got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      // mmrt's rendering carries the BOS the HF processor's tokenizer call adds.
      ASSERT_EQ(got[i].rfind("<s>", 0), 0u);
      EXPECT_EQ(got[i].substr(3), hub[i].get<std::string>()) << i;
      EXPECT_EQ(got[i].substr(3), written[i].get<std::string>()) << i;
    }
  }
  EXPECT_THROW(
      llava::render_chat(llava::ChatFormat::kMistral, {ChatMessage::text("tool", "x")}, true),
      InvalidArgument);
  ChatMessage video;
  video.role = "user";
  video.content = {{K::kVideo, ""}};
  EXPECT_THROW(llava::render_chat(llava::ChatFormat::kVicuna, {video}, true), Unimplemented);
}

}  // namespace
