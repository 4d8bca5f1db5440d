// The vision tower, get_rope_index and the full image+text model against the PyTorch reference
// (tests/reference/qwen2_vl_ref.py) on the tiny checkpoint. Tolerances as in test_qwen2_text.cpp:
// 1e-4 relative (to the largest reference value) in f32; greedy tokens identical.
#include <gtest/gtest.h>

#include <cstring>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "batch_runner.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "models/decoder/decoder.h"
#include "models/qwen2_vl/config.h"
#include "models/qwen2_vl/processor.h"
#include "models/qwen2_vl/tiny_checkpoint.h"
#include "models/qwen2_vl/vision_tower.h"
#include "ref_test_util.h"
#include "test_model.h"

namespace fs = std::filesystem;
using namespace mmrt;
using models::qwen2_vl::GridThw;

namespace {

// Minimal .npy (v1.0) writer for the reference script's inputs.
void write_npy(const fs::path& p, const char* descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes) {
  std::string sh = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    sh += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  sh += ")";
  std::string header =
      "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + sh + ", }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::ofstream f(p, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  f.write(reinterpret_cast<const char*>(&len), 2);
  f << header;
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

std::vector<char> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string shell(const std::string& cmd) {
  fs::path out = fs::temp_directory_path() / ("mmrt_vref_" + std::to_string(::getpid()));
  EXPECT_EQ(std::system((cmd + " > " + out.string()).c_str()), 0) << cmd;
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  fs::remove(out);
  return ss.str();
}

struct World {
  fs::path dir;
  models::qwen2_vl::Config cfg;
  std::vector<GridThw> grids{{1, 4, 6}, {1, 8, 4}};
  Tensor pixels;  // [sum t*h*w, 1176]
  fs::path pix_npy, grid_npy;

  explicit World(DType dtype) {
    dir = fs::temp_directory_path() / ("mmrt_vision_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    models::qwen2_vl::TinyOptions o;
    o.dtype = dtype;
    o.seed = 5;
    cfg = models::qwen2_vl::make_tiny_checkpoint(dir.string(), o).config;
    int64_t n = 0;
    for (auto& g : grids) n += g[0] * g[1] * g[2];
    pixels = Tensor::empty(DType::kF32, {n, 1176});
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.f, 1.f);
    for (int64_t i = 0; i < pixels.numel(); ++i) pixels.data<float>()[i] = d(rng);
    pix_npy = dir / "pixels.npy";
    grid_npy = dir / "grid.npy";
    write_npy(pix_npy, "<f4", {n, 1176}, pixels.raw(), pixels.nbytes());
    std::vector<int64_t> g;
    for (auto& x : grids) g.insert(g.end(), x.begin(), x.end());
    write_npy(grid_npy, "<i8", {static_cast<int64_t>(grids.size()), 3}, g.data(), g.size() * 8);
  }
  ~World() { fs::remove_all(dir); }

  std::string ref(const std::string& mode, const std::string& extra) const {
    return std::string(MMRT_REF_PYTHON) + " " + MMRT_SOURCE_DIR +
           "/tests/reference/qwen2_vl_ref.py " + mode + " --model " + dir.string() + " --pixels " +
           pix_npy.string() + " --grid " + grid_npy.string() + " " + extra;
  }

  // "<text> <|vision_start|><|image_pad|><|vision_end|> ..." with random text ids around.
  std::vector<int32_t> prompt_with_single_pads() const {
    std::mt19937 rng(17);
    std::uniform_int_distribution<int32_t> d(0, 900);
    std::vector<int32_t> ids;
    auto text = [&](int n) {
      for (int i = 0; i < n; ++i) ids.push_back(d(rng));
    };
    text(5);
    for (size_t i = 0; i < grids.size(); ++i) {
      ids.push_back(static_cast<int32_t>(cfg.vision_start_token_id));
      ids.push_back(static_cast<int32_t>(cfg.image_token_id));
      ids.push_back(static_cast<int32_t>(cfg.vision_end_token_id));
      text(4 + static_cast<int>(i));
    }
    return ids;
  }
};

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

double rel_err(const float* got, const float* want, size_t n) {
  return test::diff(got, want, static_cast<int64_t>(n)).rel();
}

}  // namespace

TEST(Qwen2Vision, EmbeddingsMatchReference) {
  World w(DType::kF32);
  auto st = io::SafeTensors::open(w.dir.string());
  auto vt = models::qwen2_vl::VisionTower::load(test::test_backend(), st, w.cfg,
                                                kernels::WeightFormat::kF32);
  Tensor got = test::host(vt->forward(w.pixels, w.grids));  // [merged, hidden]
  EXPECT_EQ(got.dim(0), (4 * 6 + 8 * 4) / 4);
  EXPECT_EQ(got.dim(1), w.cfg.text.hidden_size);
  fs::path out = w.dir / "vision.bin";
  shell(w.ref("vision", "--out " + out.string()));
  auto ref = read_bytes(out);
  ASSERT_EQ(ref.size(), got.nbytes());
  EXPECT_LE(rel_err(got.data<float>(), reinterpret_cast<const float*>(ref.data()),
                    static_cast<size_t>(got.numel())),
            1e-4);
}

// The tower as a job of one part per block (the engine runs a large image's encoder a few blocks
// a step): in any split, the same bits as forward(); parts past the end and a result before it
// are errors.
TEST(Qwen2Vision, TheTowerInPartsEqualsForwardBitForBit) {
  World w(DType::kBF16);
  auto st = io::SafeTensors::open(w.dir.string());
  auto vt = models::qwen2_vl::VisionTower::load(test::test_backend(), st, w.cfg,
                                                kernels::WeightFormat::kBF16);
  const Tensor whole = test::host(vt->forward(w.pixels, w.grids));
  ASSERT_EQ(vt->parts(), w.cfg.vision.depth + 1);  // a part per block, one for the merger
  ASSERT_GE(w.cfg.vision.depth, 2) << "the tiny tower needs two blocks for this test";
  for (int64_t first : {int64_t{1}, vt->parts() - 1}) {
    auto job = vt->begin(w.pixels, w.grids);
    ASSERT_EQ(job->parts(), vt->parts());
    EXPECT_THROW(job->result(), InternalError);
    job->run(0);
    job->run(first);
    EXPECT_EQ(job->done(), first);
    EXPECT_THROW(job->run(job->parts()), InternalError);
    job->run(job->parts() - first);
    const Tensor got = test::host(job->result());
    ASSERT_EQ(got.nbytes(), whole.nbytes());
    EXPECT_EQ(std::memcmp(got.raw(), whole.raw(), got.nbytes()), 0) << "first " << first;
  }
}

// The int8 encoder blocks (EncoderPrecision: block 0 of 2 int8, x per row, integer sums; block
// 1 and the projections f32) against the reference that applies the same quantisation. The
// implementation's error must be an order of magnitude below the quantisation's own effect (the
// same reference without it): equal up to float rounding, which can move a value across a
// rounding boundary of the next quantisation now and then.
TEST(Qwen2Vision, Int8BlocksMatchTheQuantisedReference) {
  World w(DType::kF32);
  const kernels::Backend& be = test::test_backend();
  std::string why;
  const std::optional<models::EncoderPrecision> int8 = test::int8_encoder(1, why);
  if (!int8) GTEST_SKIP() << why;
  const models::EncoderPrecision& prec = *int8;
  ASSERT_TRUE(prec.int8);
  EXPECT_EQ(prec.describe(2), prec.int8_scores ? "int8 (blocks 0-0, int8 attention scores; the "
                                                 "last 1 and the projections f32)"
                                               : "int8 (blocks 0-0; the last 1 and the "
                                                 "projections f32)");
  auto st = io::SafeTensors::open(w.dir.string());
  auto vt = models::qwen2_vl::VisionTower::load(be, st, w.cfg, prec);
  Tensor got = test::host(vt->forward(w.pixels, w.grids));
  auto ref_of = [&](int blocks) {
    fs::path out = w.dir / ("vision_q" + std::to_string(blocks) + ".bin");
    shell(w.ref("vision",
                test::int8_ref_args("--int8-blocks", blocks, prec) + " --out " + out.string()));
    auto r = read_bytes(out);
    EXPECT_EQ(r.size(), got.nbytes());
    return r;
  };
  const auto quantised = ref_of(1), exact = ref_of(0);
  const float* q = reinterpret_cast<const float*>(quantised.data());
  const float* e = reinterpret_cast<const float*>(exact.data());
  const test::Diff di = test::diff(got.data<float>(), q, got.numel()),
                   de = test::diff(e, q, got.numel());
  const double impl = di.rel(), effect = de.rel();
  std::printf(
      "int8 blocks: relative error %.2e against the quantised reference, %.2e the "
      "quantisation's own effect; mean |error| %.2e against %.2e\n",
      impl, effect, di.mean_abs(), de.mean_abs());
  // The largest error is one or two values across a rounding boundary (1.06e-5 where the f32
  // GEMM sums in another order, an AMX CPU); the mean says the rest is float rounding.
  EXPECT_LE(impl, 0.1 * effect) << "mmrt's int8 blocks differ from the quantised reference by "
                                << impl << ", the quantisation itself moves the output by "
                                << effect;
  EXPECT_LE(di.mean_abs(), de.mean_abs() / 20)
      << "mmrt's int8 blocks are not the quantised reference's";
  EXPECT_GT(effect, 3e-5) << "block 0 was not quantised in the reference";
}

TEST(Qwen2Vision, RopeIndexMatchesReference) {
  World w(DType::kF32);
  auto p = models::qwen2_vl::expand_image_prompt(w.prompt_with_single_pads(), w.grids, w.cfg);
  ASSERT_EQ(p.items.size(), 2u);
  EXPECT_EQ(p.items[0].n_tokens, 6);
  EXPECT_EQ(p.items[1].n_tokens, 8);
  fs::path out = w.dir / "pos.bin";
  shell(w.ref("positions", "--ids " + join(p.ids) + " --out " + out.string()));
  auto raw = read_bytes(out);
  const int64_t* ref = reinterpret_cast<const int64_t*>(raw.data());
  const size_t S = p.ids.size();
  ASSERT_EQ(raw.size(), (3 * S + 1) * 8);
  for (size_t i = 0; i < 3 * S; ++i) ASSERT_EQ(p.positions[i], ref[i]) << "position " << i;
  EXPECT_EQ(p.rope_delta, ref[3 * S]);
  // Placeholder/grid mismatches are caller errors.
  EXPECT_THROW(models::qwen2_vl::expand_image_prompt(w.prompt_with_single_pads(),
                                                     {w.grids.data(), 1}, w.cfg),
               InvalidArgument);
}

TEST(Qwen2Vision, ImageTextLogitsAndGreedyMatchReference) {
  World w(DType::kF32);
  auto st = io::SafeTensors::open(w.dir.string());
  auto vt = models::qwen2_vl::VisionTower::load(test::test_backend(), st, w.cfg,
                                                kernels::WeightFormat::kF32);
  test::TestModelOptions lo;
  lo.kv_dtype = DType::kF32;
  lo.kv_blocks = 64;
  auto lm = test::load_test_model(w.dir.string(), lo);
  auto p = models::qwen2_vl::expand_image_prompt(w.prompt_with_single_pads(), w.grids, w.cfg);
  Tensor feats = vt->forward(w.pixels, w.grids);

  engine::TextRequest r;
  r.prompt = p.ids;
  r.positions = p.positions;
  r.rope_delta = p.rope_delta;
  for (const auto& im : p.items)
    for (int64_t k = 0; k < im.n_tokens; ++k)
      r.embed_rows.push_back(static_cast<int32_t>(im.begin + k));
  r.embeds = feats;
  r.sampling.max_tokens = 32;
  r.sampling.ignore_eos = true;

  // Last-token logits of the prompt, prefilled in chunks of 7 (image spans split across chunks).
  {
    std::vector<int32_t> blocks{3, 1, 2, 0};
    const int64_t S = static_cast<int64_t>(p.ids.size());
    const Tensor logits =
        test::chunked_prefill(*lm, p.ids, r.embed_rows, feats, 7, blocks, p.positions, 3);
    fs::path out = w.dir / "logits.bin";
    shell(w.ref("logits", "--ids " + join(p.ids) + " --out " + out.string()));
    auto ref = read_bytes(out);
    const int64_t V = logits.dim(1);
    ASSERT_EQ(ref.size(), static_cast<size_t>(S * V * 4));
    EXPECT_LE(
        rel_err(logits.data<float>(), reinterpret_cast<const float*>(ref.data()) + (S - 1) * V,
                static_cast<size_t>(V)),
        1e-4);
  }
  // Greedy generation through the batch runner (decode positions = cache index + rope_delta).
  auto tok = io::Tokenizer::from_file((w.dir / "tokenizer.json").string());
  engine::BatchRunnerOptions bo;
  bo.step_token_budget = 9;
  auto got = engine::run_text_batch(*lm, tok, {r}, bo)[0].tokens;
  auto want =
      nlohmann::json::parse(shell(w.ref("generate", "--ids " + join(p.ids) + " --max-new 32")))
          .get<std::vector<int32_t>>();
  EXPECT_EQ(got, want);
}
