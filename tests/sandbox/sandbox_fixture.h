// A tiny checkpoint and a few real images (written by PIL) for the media sandbox's tests, and a
// sandbox configuration whose workers are the mmrt binary built with these tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer_cache.h"
#include "engine/engine.h"
#include "media/image.h"
#include "models/qwen2_vl/tiny_checkpoint.h"
#include "models/registry.h"
#include "sandbox/media_sandbox.h"

namespace mmrt::testing {

class SandboxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("mmrt_sandbox_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    models::qwen2_vl::TinyOptions o;
    o.dtype = DType::kF32;
    o.seed = 5;
    models::qwen2_vl::make_tiny_checkpoint(dir_.string(), o);
    const std::string d = dir_.string();
    const std::string cmd =
        std::string(MMRT_REF_PYTHON) +
        " -c \"from PIL import Image; import numpy as np; r=np.random.default_rng(1); "
        "Image.fromarray(r.integers(0,255,(60,90,3),dtype=np.uint8)).save('" +
        d +
        "/a.png'); "
        "Image.fromarray(r.integers(0,255,(300,410,3),dtype=np.uint8)).save('" +
        d +
        "/b.jpg', quality=90); "
        "Image.new('RGB',(6000,6000),(200,30,60)).save('" +
        d + "/bomb.png')\"";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    processor_ = models::load_processor(d);
  }
  static void TearDownTestSuite() {
    processor_.reset();
    std::filesystem::remove_all(dir_);
  }

  static std::vector<uint8_t> bytes(const std::string& name) {
    std::ifstream f(dir_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  static std::string model_dir() { return dir_.string(); }

  static sandbox::MediaSandboxConfig config() {
    sandbox::MediaSandboxConfig c;
    c.enabled = true;
    c.worker_exe = MMRT_EXE;
    c.model_dir = dir_.string();
    c.test_hooks = true;
    return c;
  }

  // An engine over `dir` (the fixture's model by default) with f32 KV, 256 blocks, the media
  // sandbox on or off.
  static engine::EngineConfig engine_config(bool sandboxed, const std::string& dir = "") {
    engine::EngineConfig c;
    c.model_dir = dir.empty() ? model_dir() : dir;
    c.kv.dtype = DType::kF32;
    c.kv.blocks = 256;
    c.media_sandbox = config();
    c.media_sandbox.enabled = sandboxed;
    return c;
  }

  // What the engine would get without the sandbox.
  static models::PreparedMedia in_process(const std::vector<uint8_t>& b) {
    return processor_->preprocess(models::Modality::kImage, b, media::MediaContext{});
  }
  static sandbox::Job job(const std::vector<uint8_t>& b, const std::string& tenant = "t",
                          sandbox::TestHook hook = sandbox::TestHook::kNone) {
    sandbox::Job j;
    j.bytes = b;
    j.tenant = tenant;
    j.hook = hook;
    j.estimate = processor_->estimate(models::Modality::kImage, b);
    return j;
  }
  static void expect_same(const models::PreparedMedia& a, const models::PreparedMedia& b) {
    ASSERT_EQ(a.features.shape(), b.features.shape());
    ASSERT_EQ(a.features.dtype(), b.features.dtype());
    EXPECT_EQ(a.dims, b.dims);
    EXPECT_EQ(a.n_tokens, b.n_tokens);
    EXPECT_EQ(a.encoder_cost, b.encoder_cost);
    EXPECT_EQ(a.kept_tokens, b.kept_tokens);
    EXPECT_EQ(std::memcmp(a.features.raw(), b.features.raw(), a.features.nbytes()), 0);
  }

  static std::filesystem::path dir_;
  static std::unique_ptr<models::Processor> processor_;  // the checkpoint's, loaded once
};
inline std::filesystem::path SandboxTest::dir_;
inline std::unique_ptr<models::Processor> SandboxTest::processor_;

}  // namespace mmrt::testing
