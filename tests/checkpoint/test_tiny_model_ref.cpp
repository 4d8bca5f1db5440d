// make-tiny-model output checked by an independent Python reader of the Hugging Face layout
// (tests/reference/check_checkpoint.py): every layout passes, and the check is not a rubber stamp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "models/qwen2_5_vl/tiny_checkpoint.h"
#include "models/qwen2_vl/tiny_checkpoint.h"
#include "test_util.h"

namespace mmrt {
namespace {

namespace fs = std::filesystem;
using models::qwen2_vl::TinyOptions;
using ::testing::HasSubstr;
using testing::TempDir;

// Runs the Python reference on `dir`; returns its exit status, output in *out.
int python_check(const fs::path& dir, const std::string& extra, std::string* out) {
  std::string cmd = std::string(MMRT_REF_PYTHON) + " " + MMRT_SOURCE_DIR +
                    "/tests/reference/check_checkpoint.py " + dir.string() + " " + extra;
  return testing::run_command(cmd, out);
}

TEST(TinyModelReference, EveryLayoutPassesTheIndependentCheck) {
  struct Layout {
    models::qwen2_vl::Naming naming;
    bool tied;
    DType dtype;
    uint64_t shard;
    const char* args;
  };
  ThreadPool pool(2);
  for (const Layout& l : {Layout{models::qwen2_vl::Naming::kOld, false, DType::kBF16, 2'000'000'000,
                                 "--naming old --tied no --dtype bf16"},
                          Layout{models::qwen2_vl::Naming::kNew, true, DType::kF32, 2'000'000'000,
                                 "--naming new --tied yes --dtype f32"},
                          Layout{models::qwen2_vl::Naming::kNew, false, DType::kBF16, 200'000,
                                 "--naming new --tied no"}}) {
    SCOPED_TRACE(l.args);
    TempDir dir("tiny");
    TinyOptions o;
    o.naming = l.naming;
    o.tied = l.tied;
    o.dtype = l.dtype;
    o.max_shard_bytes = l.shard;
    o.pool = &pool;
    models::qwen2_vl::make_tiny_checkpoint(dir.path().string(), o);
    std::string out;
    EXPECT_EQ(python_check(dir.path(), l.args, &out), 0) << out;
  }
}

// Qwen2.5-VL's checkpoints (Qwen2-VL's files, its own vision tensors and config) pass the same
// independent check, in both namings, tied and untied, bf16 and f32.
TEST(TinyModelReference, Qwen25VLLayoutsPassTheIndependentCheck) {
  struct Layout {
    const char* naming;
    bool tied;
    DType dtype;
    const char* args;
  };
  for (const Layout& l :
       {Layout{"old", false, DType::kBF16, "--naming old --tied no --dtype bf16"},
        Layout{"new", true, DType::kF32, "--naming new --tied yes --dtype f32"}}) {
    SCOPED_TRACE(l.args);
    TempDir dir("tiny25");
    models::TinyModelOptions o;
    o.naming = l.naming;
    o.tied = l.tied;
    o.dtype = l.dtype;
    models::qwen2_5_vl::make_tiny_model(dir.path().string(), o);
    std::string out;
    EXPECT_EQ(python_check(dir.path(), l.args, &out), 0) << out;
  }
}

// The independent Python check is not a rubber stamp: it reports a wrong shape, a norm weight
// that is not 1 and a missing tensor.
TEST(TinyModelReference, ReferenceScriptDetectsProblems) {
  TempDir good_{"tiny"}, bad_{"tiny"};
  models::qwen2_vl::make_tiny_checkpoint(good_.path().string(), {});
  io::NamedTensors tensors_;
  {
    io::SafeTensors st = io::SafeTensors::open(good_.path().string());
    for (const auto& n : st.names()) tensors_.emplace_back(n, st.get(n).clone());
  }
  auto erase = [&](const std::string& name) {
    std::erase_if(tensors_, [&](const auto& p) { return p.first == name; });
  };
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json",
                        "generation_config.json", "preprocessor_config.json"})
    fs::copy_file(good_.file(f), bad_.file(f));
  erase("visual.merger.ln_q.bias");
  for (auto& [n, t] : tensors_) {
    if (n == "model.layers.0.mlp.down_proj.weight") t = t.reshape({128, 64});
    if (n == "model.norm.weight") t.data<bf16_t>()[3].bits = 0x3F00;  // 0.5
  }
  io::write_checkpoint(bad_.path().string(), tensors_, 1ull << 40, {{"format", "pt"}});
  std::string out;
  EXPECT_EQ(python_check(bad_.path(), "", &out), 1) << out;
  EXPECT_THAT(out, HasSubstr("missing tensor visual.merger.ln_q.bias"));
  EXPECT_THAT(out, HasSubstr("model.layers.0.mlp.down_proj.weight: shape (128, 64), expected "
                             "(64, 128)"));
  EXPECT_THAT(out, HasSubstr("model.norm.weight: norm parameter is not all 1.0"));
}

}  // namespace
}  // namespace mmrt
