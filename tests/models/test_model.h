// A checkpoint loaded through the registry, as the engine loads it, with a KV cache of its own:
// what the model tests drive directly (no scheduler).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../common/emulated_device.h"
#include "core/device.h"
#include "kernels/backend.h"
#include "kernels/kv_cache.h"
#include "kernels/registry.h"
#include "models/encoder_block.h"
#include "models/model.h"
#include "models/registry.h"
#include "models/session.h"

namespace mmrt::test {

// The device the model tests compute on: $MMRT_TEST_DEVICE ("cpu" when unset, "cuda", "cuda:N",
// or "emulated": the CPU's kernels on memory called a GPU's, ../common/emulated_device.h).
// ctest runs the model suites once per backend this build has (models_ref, models_ref_cuda,
// models_ref_emulated); device_env.cpp skips a whole run, with the reason, where its device is
// absent or lacks an op a family needs.
inline bool emulated_device() {
  const char* env = std::getenv("MMRT_TEST_DEVICE");
  return env && std::string(env) == "emulated";
}
inline Device test_device() {
  if (emulated_device()) return kEmulatedDevice;
  const char* env = std::getenv("MMRT_TEST_DEVICE");
  return parse_device(env && *env ? env : "cpu");
}

// The compute every model test runs on (on the CPU: all cores, the best kernel variant).
inline const kernels::Backend& test_backend() {
  static const std::unique_ptr<kernels::Backend> b = emulated_device()
                                                         ? std::make_unique<EmulatedDevice>()
                                                         : kernels::create_backend(test_device());
  return *b;
}

// The encoder precision the int8 tower tests run: every block int8 but the last `keep_last`,
// f32 otherwise; nullopt with the reason in `why` where the backend has no integer GEMM (the
// test then skips).
inline std::optional<models::EncoderPrecision> int8_encoder(int keep_last, std::string& why) {
  models::LoadOptions lo;
  lo.encoder_weights = "int8";
  lo.encoder_keep_last = keep_last;
  try {
    return models::encoder_precision(test_backend(), lo, kernels::WeightFormat::kF32);
  } catch (const InvalidArgument& e) {
    why = e.what();
    return std::nullopt;
  }
}

// The reference scripts' arguments for the same quantisation as `prec` on the first `n` blocks:
// " FLAG n", and " --int8-attention" where those blocks' attention scores are int8 too.
inline std::string int8_ref_args(const char* flag, int n, const models::EncoderPrecision& prec) {
  return " " + std::string(flag) + " " + std::to_string(n) +
         (n > 0 && prec.int8_scores ? " --int8-attention" : "");
}

// `t` in host memory (itself when it is already there), for comparing with a reference.
inline Tensor host(const Tensor& t) {
  return t.device().kind == DeviceKind::kCpu ? t : test_backend().to_host(t);
}

struct TestModelOptions {
  std::optional<kernels::WeightFormat> weight_format;
  kernels::WeightPlacement weight_placement = kernels::WeightPlacement::kCopy;
  kernels::Int8Activations int8_activations = kernels::Int8Activations::kQ8;
  kernels::Int8Gemm int8_prefill = kernels::Int8Gemm::kBF16;
  DType kv_dtype = DType::kBF16;
  int32_t kv_block_size = 16;
  int32_t kv_blocks = 256;
};

// A model loaded on the test backend with a KV cache of its own (models::Session).
using TestModel = models::Session;

inline std::unique_ptr<TestModel> load_test_model(const std::string& dir,
                                                  const TestModelOptions& o = {}) {
  return models::Session::load(
      test_backend(), dir,
      {o.weight_format, o.weight_placement, o.int8_activations, o.int8_prefill},
      {.dtype = o.kv_dtype, .block_size = o.kv_block_size, .blocks = o.kv_blocks});
}

// The last-token logits ([1, vocab], a host copy) of `ids` prefilled in chunks of `chunk` tokens
// through `block_table` (Session::prefill), so media runs split across steps: the prompt rows
// `rows` (increasing) take the rows of `embeds` ([rows.size(), hidden] f32) in order;
// `positions` ([position_rows, ids.size()], or empty for position = index) are sliced per chunk.
inline Tensor chunked_prefill(TestModel& lm, std::span<const int32_t> ids,
                              std::span<const int32_t> rows, const Tensor& embeds, int64_t chunk,
                              std::span<const int32_t> block_table,
                              std::span<const int32_t> positions = {}, int position_rows = 1) {
  return lm.prefill({.ids = ids,
                     .positions = positions,
                     .position_rows = position_rows,
                     .media_rows = rows,
                     .media = &embeds},
                    chunk, block_table);
}

// `item`'s encode as the engine runs it in parts (Runner::encode_job): in `parts` parts, run
// one then the rest and all but one then the last, each the same bits as `whole` (its
// encode()); parts past the end and a result before the last are errors.
inline void expect_parts_equal_encode(models::Runner& r, const models::PreparedMedia& item,
                                      const Tensor& whole, int64_t parts) {
  ASSERT_EQ(r.encode_parts(item), parts);
  const Tensor want = host(whole);
  for (int64_t first : {int64_t{1}, parts - 1}) {
    SCOPED_TRACE("first " + std::to_string(first) + " of " + std::to_string(parts) + " parts");
    std::unique_ptr<models::EncodeJob> job = r.encode_job(item);
    ASSERT_EQ(job->parts(), parts);
    EXPECT_THROW(job->result(), InternalError);
    job->run(first);
    EXPECT_EQ(job->done(), first);
    EXPECT_THROW(job->run(parts), InternalError);
    job->run(parts - first);
    const Tensor got = host(job->result());
    ASSERT_EQ(got.nbytes(), want.nbytes());
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0);
  }
}

}  // namespace mmrt::test
