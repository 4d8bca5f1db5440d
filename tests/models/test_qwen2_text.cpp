// The Qwen2-VL language model against the independent PyTorch reference
// (tests/reference/qwen2_vl_ref.py) on tiny random checkpoints written by make-tiny-model.
//
// Tolerances: f32 weights + f32 KV: final logits within 1e-4 of the reference, relative to the
// largest reference logit; bf16 weights + bf16 KV: within 4e-2 (bf16 has 8 mantissa bits and the
// prefill GEMM rounds activations to bf16); int8 weights in a decode step: within 2e-2.
// Greedy generation of 32 tokens must be identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "batch_runner.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/decoder/decoder.h"
#include "models/qwen2_vl/tiny_checkpoint.h"
#include "test_model.h"

namespace fs = std::filesystem;
using namespace mmrt;

namespace {

fs::path make_dir(const std::string& tag) {
  fs::path p =
      fs::temp_directory_path() / ("mmrt_models_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string ids_arg(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s;
}

std::string run(const std::string& cmd) {
  std::string out_file =
      (fs::temp_directory_path() / ("mmrt_ref_out_" + std::to_string(::getpid()))).string();
  int rc = std::system((cmd + " > " + out_file).c_str());
  EXPECT_EQ(rc, 0) << cmd;
  std::ifstream f(out_file);
  std::stringstream ss;
  ss << f.rdbuf();
  fs::remove(out_file);
  return ss.str();
}

std::string ref_cmd(const std::string& mode, const fs::path& model,
                    const std::vector<int32_t>& ids) {
  return std::string(MMRT_REF_PYTHON) + " " + MMRT_SOURCE_DIR +
         "/tests/reference/qwen2_vl_ref.py " + mode + " --model " + model.string() + " --ids " +
         ids_arg(ids);
}

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  f.seekg(0, std::ios::end);
  size_t n = static_cast<size_t>(f.tellg()) / 4;
  f.seekg(0);
  std::vector<float> v(n);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4));
  return v;
}

std::vector<int32_t> random_prompt(int n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

struct Fixture {
  fs::path dir;
  std::shared_ptr<void> cleanup;  // removes dir when the last copy goes, even after a failure
  DType dtype;
  std::unique_ptr<io::Tokenizer> tok;
  int32_t tok_size = 0;
};

Fixture make_model(DType dtype, bool tied, const std::string& tag) {
  Fixture f;
  f.dir = make_dir(tag);
  f.cleanup = std::shared_ptr<void>(nullptr, [d = f.dir](void*) { fs::remove_all(d); });
  f.dtype = dtype;
  models::qwen2_vl::TinyOptions o;
  o.dtype = dtype;
  o.seed = 11;
  o.tied = tied;
  auto r = models::qwen2_vl::make_tiny_checkpoint(f.dir.string(), o);
  f.tok = std::make_unique<io::Tokenizer>(
      io::Tokenizer::from_file((f.dir / "tokenizer.json").string()));
  f.tok_size = r.tokenizer_size;
  return f;
}

test::TestModelOptions opts_for(DType dtype) {
  test::TestModelOptions o;
  o.kv_dtype = dtype;
  o.kv_blocks = 256;
  return o;
}

// Compares the last-token logits and names the first diverging layer on failure. With
// `decode_last`, the 64th token runs as a decode step of its own (the matrix-vector kernels)
// after a 63-token prefill, and `o` sets the model options (else opts_for(f.dtype)).
void check_logits(const Fixture& f, double tol, bool decode_last = false,
                  std::optional<test::TestModelOptions> o = std::nullopt) {
  auto prompt = random_prompt(64, f.tok_size, 5);
  auto model = test::load_test_model(f.dir.string(), o.value_or(opts_for(f.dtype)));
  Tensor hidden;
  if (!decode_last) model->runner().capture_hidden_states(&hidden);
  std::vector<int32_t> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(7 - i);  // non-contiguous on purpose
  models::SeqStep s;
  s.tokens = prompt;
  s.block_table = blocks;
  if (decode_last) {
    s.tokens = std::span<const int32_t>(prompt).first(63);
    s.want_logits = false;
    model->forward({&s, 1});
    s.tokens = std::span<const int32_t>(prompt).subspan(63);
    s.kv_before = 63;
    s.want_logits = true;
  }
  Tensor logits = test::host(model->forward({&s, 1})).clone();  // [1, vocab], a host copy

  fs::path lf = f.dir / "ref_logits.bin", hf = f.dir / "ref_hidden.bin";
  run(ref_cmd("logits", f.dir, prompt) + " --out " + lf.string());
  run(ref_cmd("hidden", f.dir, prompt) + " --out " + hf.string());
  auto ref = read_f32(lf);
  const int64_t V = logits.dim(1);
  ASSERT_EQ(ref.size(), static_cast<size_t>(64 * V));
  const float* want = ref.data() + 63 * V;
  double max_ref = 0, max_err = 0;
  for (int64_t i = 0; i < V; ++i) {
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
    max_err = std::max(max_err, std::fabs(static_cast<double>(want[i]) - logits.data<float>()[i]));
  }
  double rel = max_err / max_ref;
  if (rel > tol && !decode_last) {
    // Name the first layer whose output differs by more than the tolerance.
    auto ref_h = read_f32(hf);
    const int64_t L = hidden.dim(0), N = hidden.dim(1), H = hidden.dim(2);
    ASSERT_EQ(ref_h.size(), static_cast<size_t>(L * N * H));
    for (int64_t l = 0; l < L; ++l) {
      double mr = 0, me = 0;
      for (int64_t i = 0; i < N * H; ++i) {
        double a = ref_h[static_cast<size_t>(l * N * H + i)],
               b = hidden.data<float>()[l * N * H + i];
        mr = std::max(mr, std::fabs(a));
        me = std::max(me, std::fabs(a - b));
      }
      if (me / mr > tol) {
        ADD_FAILURE() << "first divergence at "
                      << (l == 0 ? std::string("the embeddings")
                                 : "decoder layer " + std::to_string(l - 1))
                      << ": max error " << me << " vs max |ref| " << mr;
        break;
      }
    }
  }
  EXPECT_LE(rel, tol) << "last-token logits: max error " << max_err << ", max |ref| " << max_ref;
}

std::vector<int32_t> greedy(test::TestModel& m, const io::Tokenizer& tok,
                            const std::vector<int32_t>& prompt, int n, int32_t budget = 512) {
  engine::TextRequest r;
  r.prompt = prompt;
  r.sampling.max_tokens = n;
  r.sampling.ignore_eos = true;
  engine::BatchRunnerOptions o;
  o.step_token_budget = budget;
  return engine::run_text_batch(m, tok, {r}, o)[0].tokens;
}

void check_greedy(const Fixture& f) {
  auto prompt = random_prompt(64, f.tok_size, 9);
  auto model = test::load_test_model(f.dir.string(), opts_for(f.dtype));
  auto got = greedy(*model, *f.tok, prompt, 32);
  auto js = nlohmann::json::parse(run(ref_cmd("generate", f.dir, prompt) + " --max-new 32"));
  std::vector<int32_t> want = js.get<std::vector<int32_t>>();
  EXPECT_EQ(got, want);
}

}  // namespace

TEST(Qwen2Text, F32LogitsMatchReference) {
  auto f = make_model(DType::kF32, false, "f32");
  check_logits(f, 1e-4);
}

TEST(Qwen2Text, BF16LogitsMatchReference) {
  auto f = make_model(DType::kBF16, true, "bf16");
  check_logits(f, 4e-2);
}

// int8 weights (per-channel, quantised at load) in a decode step, with x quantised in Q8 blocks
// (where the CPU has the kernel) and strictly weight-only: the last-token logits of the f32
// checkpoint within 2e-2 of the f32 reference, relative to the largest logit (measured on the
// tiny checkpoint: 8.1e-3 with q8 activations, 6.9e-3 weight-only).
TEST(Qwen2Text, Int8DecodeLogitsMatchReference) {
  auto f = make_model(DType::kF32, false, "int8");
  const auto* cpu = dynamic_cast<const kernels::CpuBackend*>(&test::test_backend());
  if (cpu && !kernels::int8_q8_available(cpu->isa()))
    std::printf("[   INFO   ] this CPU has no AVX512-VNNI: q8 activations run the float kernel\n");
  for (auto act : {kernels::Int8Activations::kQ8, kernels::Int8Activations::kFloat}) {
    SCOPED_TRACE(act == kernels::Int8Activations::kQ8 ? "q8 activations" : "float activations");
    test::TestModelOptions o = opts_for(DType::kF32);
    o.weight_format = kernels::WeightFormat::kInt8;
    o.int8_activations = act;
    check_logits(f, 2e-2, true, o);
  }
}

// int8 weights with --int8-prefill q8 on a 64-token prompt chunk: every decoder linear runs
// the GEMM path on x quantised per token. Against the reference that quantises the same way
// (int8_ref.py) every layer's output agrees up to float rounding (the implementation is exact;
// float rounding can move a value across a rounding boundary of the next quantisation now and
// then); the quantisation's own effect (the reference without it) is an order of magnitude
// larger, and reported with its effect on the last-token logits.
TEST(Qwen2Text, Int8PrefillQ8RowsMatchTheQuantisedReference) {
  const auto* cpu = dynamic_cast<const kernels::CpuBackend*>(&test::test_backend());
  if (!cpu || !kernels::int8_q8_available(cpu->isa()))
    GTEST_SKIP() << "no AVX512-VNNI: --int8-prefill q8 runs the bf16 GEMM";
  auto f = make_model(DType::kF32, false, "q8row");
  auto prompt = random_prompt(64, f.tok_size, 5);
  test::TestModelOptions o = opts_for(DType::kF32);
  o.weight_format = kernels::WeightFormat::kInt8;
  o.int8_prefill = kernels::Int8Gemm::kQ8Row;
  auto model = test::load_test_model(f.dir.string(), o);
  Tensor hidden;
  model->runner().capture_hidden_states(&hidden);
  std::vector<int32_t> blocks{3, 1, 0, 2};
  models::SeqStep s;
  s.tokens = prompt;
  s.block_table = blocks;
  s.want_logits = true;
  Tensor logits = test::host(model->forward({&s, 1}));
  const int64_t L = hidden.dim(0), N = hidden.dim(1), H = hidden.dim(2);
  auto ref_hidden = [&](bool int8) {
    fs::path out = f.dir / (int8 ? "ref_q8.bin" : "ref_f32.bin");
    run(ref_cmd("hidden", f.dir, prompt) + (int8 ? " --int8-decoder" : "") + " --out " +
        out.string());
    auto r = read_f32(out);
    EXPECT_EQ(r.size(), static_cast<size_t>(L * N * H));
    return r;
  };
  const auto quantised = ref_hidden(true), exact = ref_hidden(false);
  // Relative to the largest value, layer by layer (layer 0: the embeddings, not quantised).
  auto rel = [&](const float* a, const float* b, int64_t l) {
    double m = 0, e = 0;
    for (int64_t i = l * N * H; i < (l + 1) * N * H; ++i) {
      m = std::max(m, std::fabs(static_cast<double>(b[i])));
      e = std::max(e, std::fabs(static_cast<double>(a[i]) - b[i]));
    }
    return e / m;
  };
  for (int64_t l = 1; l < L; ++l) {
    const double impl = rel(hidden.data<float>(), quantised.data(), l);
    const double effect = rel(exact.data(), quantised.data(), l);
    std::printf(
        "decoder layer %lld: %.2e against the quantised reference, %.2e the "
        "quantisation's own effect\n",
        static_cast<long long>(l - 1), impl, effect);
    EXPECT_LE(impl, 1e-4) << "layer " << l - 1;
    EXPECT_LE(impl, 0.1 * effect) << "layer " << l - 1;
  }
  fs::path lf = f.dir / "ref_logits.bin";
  run(ref_cmd("logits", f.dir, prompt) + " --out " + lf.string());
  const auto ref = read_f32(lf);
  const int64_t V = logits.dim(1);
  ASSERT_EQ(ref.size(), static_cast<size_t>(64 * V));
  double max_ref = 0, max_err = 0;
  for (int64_t i = 0; i < V; ++i) {
    const double want = ref[static_cast<size_t>(63 * V + i)];
    max_ref = std::max(max_ref, std::fabs(want));
    max_err = std::max(max_err, std::fabs(want - logits.data<float>()[i]));
  }
  std::printf("last-token logits against the f32 model: %.2e of the largest\n", max_err / max_ref);
  EXPECT_LE(max_err / max_ref, 2e-2) << "the tolerance of the int8 decode logits";
}

TEST(Qwen2Text, F32GreedyTokensMatchReference) {
  auto f = make_model(DType::kF32, true, "greedy32");
  check_greedy(f);
}

TEST(Qwen2Text, BF16GreedyTokensMatchReference) {
  auto f = make_model(DType::kBF16, false, "greedy16");
  check_greedy(f);
}

// Each sequence decoded alone and inside a batch of 8 mixed-length sequences (prefill chunks
// and decode tokens in the same steps) yields the same tokens.
TEST(Qwen2Text, BatchInvariance) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    auto f = make_model(dt, false, "batch");
    auto model = test::load_test_model(f.dir.string(), opts_for(dt));
    std::vector<engine::TextRequest> reqs;
    std::vector<std::vector<int32_t>> alone;
    for (int i = 0; i < 8; ++i) {
      engine::TextRequest r;
      r.prompt = random_prompt(3 + 17 * i, f.tok_size, 100 + static_cast<uint32_t>(i));
      r.sampling.max_tokens = 12 + i;
      r.sampling.ignore_eos = true;
      alone.push_back(greedy(*model, *f.tok, r.prompt, r.sampling.max_tokens));
      reqs.push_back(r);
    }
    engine::BatchRunnerOptions o;
    o.step_token_budget = 40;  // forces chunked prefill mixed with decodes
    auto batched = engine::run_text_batch(*model, *f.tok, reqs, o);
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(batched[static_cast<size_t>(i)].tokens, alone[static_cast<size_t>(i)])
          << "sequence " << i << " dtype " << dtype_name(dt);
  }
}

// Bad checkpoints fail at load time, before any compute, naming the problem.
TEST(Qwen2Text, BadCheckpointsFailAtLoad) {
  auto f = make_model(DType::kF32, false, "bad");
  auto st = io::SafeTensors::open(f.dir.string());
  io::NamedTensors all;
  for (const auto& n : st.names()) all.emplace_back(n, st.get(n).clone());
  auto rewrite = [&](const io::NamedTensors& ts) {
    io::write_safetensors((f.dir / "model.safetensors.tmp").string(), ts);
    fs::rename(f.dir / "model.safetensors.tmp", f.dir / "model.safetensors");
  };
  auto expect_load_error = [&](const std::string& needle) {
    try {
      test::load_test_model(f.dir.string(), opts_for(DType::kF32));
      ADD_FAILURE() << "load succeeded, expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // Missing tensor.
  io::NamedTensors missing;
  for (const auto& [n, t] : all)
    if (n != "model.layers.1.mlp.up_proj.weight") missing.emplace_back(n, t);
  rewrite(missing);
  expect_load_error("model.layers.1.mlp.up_proj.weight");
  // Wrong shape.
  io::NamedTensors wrong = all;
  for (auto& [n, t] : wrong)
    if (n == "model.layers.0.self_attn.k_proj.weight")
      t = Tensor::zeros(DType::kF32, {t.dim(0) + 1, t.dim(1)});
  rewrite(wrong);
  expect_load_error("model.layers.0.self_attn.k_proj.weight");
  // Unsupported dtype.
  io::NamedTensors ints = all;
  for (auto& [n, t] : ints)
    if (n == "model.norm.weight") t = Tensor::zeros(DType::kI32, t.shape());
  rewrite(ints);
  expect_load_error("model.norm.weight");
  // Config / weights mismatch: config says more layers than the weights have.
  rewrite(all);
  {
    std::ifstream in(f.dir / "config.json");
    auto cfg = nlohmann::json::parse(in);
    cfg["num_hidden_layers"] = cfg["num_hidden_layers"].get<int>() + 1;
    std::ofstream(f.dir / "config.json") << cfg.dump(2);
  }
  expect_load_error("model.layers.2.");
}

TEST(Qwen2Text, ForwardRejectsBadInputs) {
  auto f = make_model(DType::kF32, false, "inputs");
  auto model = test::load_test_model(f.dir.string(), opts_for(DType::kF32));
  std::vector<int32_t> toks{1, 2, 3}, blocks{0};
  models::SeqStep s;
  s.tokens = toks;
  s.block_table = blocks;
  std::vector<int32_t> bad_tok{1, 1 << 30};
  models::SeqStep b1 = s;
  b1.tokens = bad_tok;
  EXPECT_THROW(model->forward({&b1, 1}), InvalidArgument);
  models::SeqStep b2 = s;
  b2.kv_before = 20;  // 23 tokens do not fit one block of 16
  EXPECT_THROW(model->forward({&b2, 1}), InvalidArgument);
  std::vector<int32_t> pos{0, 1};
  models::SeqStep b3 = s;
  b3.positions = pos;
  EXPECT_THROW(model->forward({&b3, 1}), InvalidArgument);
}
