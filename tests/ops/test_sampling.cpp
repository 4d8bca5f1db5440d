// The sampling ops on every device against host references written from the header's
// definitions: edits with one rounding per operation, the argmax with torch's ties and NaN, top-k
// as a full sort by (value / temperature desc, id asc). Nothing is summed, so every comparison is
// bit for bit. Logits are drawn on a coarse grid so that rows hold many equal values (ties decide
// order), with signed zeros and infinities mixed in; outputs start poisoned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/error.h"
#include "isa_fixture.h"
#include "kernels/ops.h"
#include "kernels/sampling.h"

using namespace mmrt;
using namespace mmrt::kernels;
using namespace mmrt::test;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// [n, stride] logits on a grid of 1/8 in [-4, 4] (many ties), with zeros of both signs and a few
// infinities; columns past `vocab` are NaN (a kernel must not read them).
std::vector<float> grid_logits(int64_t n, int64_t stride, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> q(-32, 32), special(0, 99);
  std::vector<float> x(static_cast<size_t>(n * stride), std::numeric_limits<float>::quiet_NaN());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < vocab; ++i) {
      float v = static_cast<float>(q(rng)) / 8.0f;
      const int s = special(rng);
      if (s == 0) v = -0.0f;
      if (s == 1) v = -kInf;
      x[static_cast<size_t>(r * stride + i)] = v;
    }
  return x;
}

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

class SamplingOpsTest : public DeviceFixture {
 protected:
  SamplingOpsTest() : DeviceFixture({Op::kEditLogits, Op::kArgmaxRows, Op::kTopKRows}) {}
};

TEST_P(SamplingOpsTest, EditsRoundEachOperationOnce) {
  const int64_t n = 3, vocab = 1000, stride = 1003;
  std::vector<float> x = grid_logits(n, stride, vocab, 1);
  // Values whose scaled result and subtraction round (a fused multiply-subtract would differ).
  x[5] = 1.1f, x[stride + 7] = -2.3f, x[2 * stride + 9] = 0.7f;
  std::vector<LogitEdit> edits{{.row = 0, .token = 5, .scale = 1.3f, .subtract = 0.1f},
                               {.row = 1, .token = 7, .scale = 1.7f, .subtract = -0.37f},
                               {.row = 2, .token = 9, .scale = 1.0f, .subtract = 0.3f},
                               {.row = 2, .token = 999, .scale = 0.9f},
                               {.row = 0, .token = 0, .scale = 2.0f, .subtract = 1.0f}};
  std::mt19937 rng(2);
  for (int i = 0; i < 200; ++i)  // more, on distinct tokens of row 1
    edits.push_back({.row = 1,
                     .token = 100 + i * 4,
                     .scale = 1.0f + static_cast<float>(rng() % 100) / 97.0f,
                     .subtract = static_cast<float>(rng() % 200) / 61.0f - 1.0f});
  std::vector<float> want = x;
  for (const LogitEdit& e : edits) {
    float& l = want[static_cast<size_t>(e.row * stride + e.token)];
    float v = l;
    if (e.scale != 1.0f) v = v > 0 ? v / e.scale : v * e.scale;
    volatile float rounded = v;  // rounded to f32 before the subtraction
    l = rounded - e.subtract;
  }
  DeviceBuf d(be(), x);
  edit_logits(be(), d.get(), n, stride, vocab, edits);
  const std::vector<float> got = d.host();
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::isnan(want[i]) && std::isnan(got[i]))) {
      ASSERT_EQ(bits(got[i]), bits(want[i])) << "element " << i;
    }
  }
}

TEST_P(SamplingOpsTest, ArgmaxRowsTakeTheFirstLargestAndNan) {
  const int64_t n = 6, vocab = 151936, stride = 151936;
  std::vector<float> x = grid_logits(n, stride, vocab, 3);
  std::fill(x.begin() + 2 * stride, x.begin() + 3 * stride, -kInf);  // row 2: all -inf
  x[3 * stride + 77777] = std::numeric_limits<float>::quiet_NaN();   // row 3: NaN wins
  x[3 * stride + 90000] = std::numeric_limits<float>::quiet_NaN();
  x[4 * stride + vocab - 1] = kInf;                                 // row 4: the last element
  std::fill(x.begin() + 5 * stride, x.begin() + 6 * stride, 0.0f);  // row 5: +0 and -0 equal
  x[5 * stride] = -0.0f;
  DeviceBuf d(be(), x);
  const std::vector<int32_t> rows{5, 0, 3, 1, 2, 4, 0};
  std::vector<int32_t> got(rows.size(), -7);
  argmax_rows(be(), d.get(), n, stride, vocab, rows, got.data());
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(got[i], argmax(x.data() + rows[i] * stride, vocab)) << "row " << rows[i];
  EXPECT_EQ(got[0], 0);
  EXPECT_EQ(got[2], 77777);
  EXPECT_EQ(got[4], 0);
  EXPECT_EQ(got[5], vocab - 1);
}

TEST_P(SamplingOpsTest, TopKRowsAreTheSortsFirstK) {
  const int64_t n = 4, vocab = 5003, stride = 5008;
  const std::vector<float> x = grid_logits(n, stride, vocab, 4);
  DeviceBuf d(be(), x);
  const std::vector<TopKRow> rows{
      {.row = 0, .k = 1, .temperature = 1.0f},    {.row = 1, .k = 7, .temperature = 0.7f},
      {.row = 2, .k = 64, .temperature = 1.3f},   {.row = 3, .k = 1024, .temperature = 0.3f},
      {.row = 1, .k = 1000, .temperature = 2.0f}, {.row = 0, .k = 333, .temperature = 0.05f}};
  size_t total = 0;
  for (const TopKRow& r : rows) total += static_cast<size_t>(r.k);
  std::vector<std::pair<float, int32_t>> got(total, {std::numeric_limits<float>::quiet_NaN(), -1});
  top_k_rows(be(), d.get(), n, stride, vocab, rows, got.data());
  size_t off = 0;
  for (const TopKRow& r : rows) {
    std::vector<std::pair<float, int32_t>> want;
    for (int64_t i = 0; i < vocab; ++i)
      want.emplace_back(x[static_cast<size_t>(r.row * stride + i)] / r.temperature,
                        static_cast<int32_t>(i));
    std::sort(want.begin(), want.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    for (int32_t j = 0; j < r.k; ++j) {
      const auto& g = got[off + static_cast<size_t>(j)];
      const auto& w = want[static_cast<size_t>(j)];
      ASSERT_EQ(g.second, w.second) << "row " << r.row << " k " << r.k << " candidate " << j;
      ASSERT_EQ(bits(g.first), bits(w.first)) << "row " << r.row << " candidate " << j;
    }
    off += static_cast<size_t>(r.k);
  }
}

TEST_P(SamplingOpsTest, RefuseRowsAndSizesOutsideTheLogits) {
  std::vector<float> x(40, 0.0f);
  DeviceBuf d(be(), x);
  int32_t id = 0;
  std::pair<float, int32_t> c;
  const std::vector<int32_t> bad_row{4};
  EXPECT_THROW(argmax_rows(be(), d.get(), 4, 10, 10, bad_row, &id), InvalidArgument);
  EXPECT_THROW(argmax_rows(be(), d.get(), 4, 9, 10, std::vector<int32_t>{0}, &id),
               InvalidArgument);  // stride < vocab
  EXPECT_THROW(top_k_rows(be(), d.get(), 4, 10, 10, std::vector<TopKRow>{{.row = 0, .k = 11}}, &c),
               InvalidArgument);
  EXPECT_THROW(top_k_rows(be(), d.get(), 4, 10, 10,
                          std::vector<TopKRow>{{.row = 0, .k = 1, .temperature = 0}}, &c),
               InvalidArgument);
  EXPECT_THROW(
      edit_logits(be(), d.get(), 4, 10, 10, std::vector<LogitEdit>{{.row = 0, .token = 10}}),
      InvalidArgument);
  EXPECT_THROW(
      edit_logits(be(), d.get(), 4, 10, 10, std::vector<LogitEdit>{{.row = -1, .token = 0}}),
      InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Devices, SamplingOpsTest, ::testing::ValuesIn(kDevices), isa_param_name);

}  // namespace
