// resize_like_torchvision against the real torchvision 0.14 / torch 1.13
// (tests/reference/resize_torch_ref.py, run once per process under MMRT_REF_PYTHON): 21 cases,
// qwen-vl-utils' frame sizes, slight upscales, odd sizes, one axis only, 1x1 and extreme ratios,
// on photographs, gradients, noise and text-like strokes, for every kernel variant this CPU runs.
// Stated tolerances:
//   vs torch's AVX2 / AVX-512 build (what torch runs on any x86-64 CPU with AVX2): every byte
//     identical (asserted as >= 99.99% of the bytes and max |diff| <= 1)
//   vs torch's no-AVX "default" build (ATEN_CPU_CAPABILITY=default; no fused multiply-adds):
//     max |diff| <= 1, >= 99.9% of the bytes identical (measured: 99.996% and more per case)
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/isa.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "io/npy.h"
#include "media/resize_torch.h"
#include "media/resize_torch_impl.h"
#include "media_test_util.h"

namespace {

namespace fs = std::filesystem;
using mmrt::Isa;
using mmrt::Tensor;
using namespace mmrt::media;

using Ref = media_test::RefRun;

const Ref& ref() {
  static const Ref r("resize_torch_ref.py", "resize_torch_ref");
  return r;
}

#define REF_OR_FAIL(var)  \
  const Ref& var = ref(); \
  ASSERT_TRUE(var.error.empty()) << var.error

using media_test::image_from_npy;

std::vector<Isa> variants() {
  std::vector<Isa> v{Isa::kPortable};
  if (mmrt::isa_supported(Isa::kAvx2)) v.push_back(Isa::kAvx2);
  if (mmrt::isa_supported(Isa::kAvx512)) v.push_back(Isa::kAvx512);
  return v;
}

struct Diff {
  size_t exact = 0, total = 0;
  int max = 0;
  double share() const { return total ? static_cast<double>(exact) / total : 1.0; }
};

Diff diff(const Image& got, const Tensor& want) {
  Diff d;
  EXPECT_EQ(got.height(), want.dim(0));
  EXPECT_EQ(got.width(), want.dim(1));
  if (got.height() != want.dim(0) || got.width() != want.dim(1)) return d;
  const uint8_t* w = want.data<uint8_t>();
  d.total = got.size_bytes();
  for (size_t i = 0; i < d.total; ++i) {
    const int e = std::abs(int(got.data()[i]) - int(w[i]));
    d.exact += e == 0;
    d.max = std::max(d.max, e);
  }
  return d;
}

std::string describe(const nlohmann::json& c, const Image& src) {
  return std::to_string(src.width()) + "x" + std::to_string(src.height()) + " -> " +
         std::to_string(c["w"].get<int>()) + "x" + std::to_string(c["h"].get<int>()) + " " +
         c["content"].get<std::string>();
}

}  // namespace

TEST(MediaResizeTorchRef, IdenticalToTorchvisionForEveryKernelVariant) {
  REF_OR_FAIL(r);
  const std::string cap = r.manifest["capability"];
  // torch's AVX2 and AVX-512 builds compute the same; its no-AVX build is the other reference.
  const bool fused_build = cap == "AVX2" || cap == "AVX512";
  int n = 0;
  for (const Isa isa : variants()) {
    const MediaContext ctx{.isa = isa};
    const std::string kname = mmrt::media::detail::torch_resize_kernels(isa).name;
    for (const auto& c : r.manifest["cases"]) {
      const Image src =
          image_from_npy(mmrt::io::read_npy((r.dir / c["src"].get<std::string>()).string()));
      const std::string what = kname + ": " + describe(c, src);
      SCOPED_TRACE(what);
      const Image got = resize_like_torchvision(src, c["w"], c["h"], ctx);
      const Diff d =
          diff(got, mmrt::io::read_npy((r.dir / c["expect"].get<std::string>()).string()));
      const Diff dd =
          diff(got, mmrt::io::read_npy((r.dir / c["expect_default"].get<std::string>()).string()));
      std::printf("  %-40s torch %s: %.4f%% exact, max %d | torch default: %.4f%% exact, max %d\n",
                  what.c_str(), cap.c_str(), 100 * d.share(), d.max, 100 * dd.share(), dd.max);
      EXPECT_LE(d.max, 1);
      EXPECT_LE(dd.max, 1);
      EXPECT_GE(dd.share(), 0.999);
      if (fused_build) {
        EXPECT_GE(d.share(), 0.9999);
      }
      ++n;
    }
  }
  EXPECT_GE(n, 21);
}

TEST(MediaResizeTorchRef, ThreadPoolGivesTheSameBytes) {
  REF_OR_FAIL(r);
  mmrt::ThreadPool pool(4);
  const MediaContext serial{};
  const MediaContext pooled{.pool = &pool, .buffers = mmrt::BufferCache::create(size_t{64} << 20)};
  for (const auto& c : r.manifest["cases"]) {
    const Image src =
        image_from_npy(mmrt::io::read_npy((r.dir / c["src"].get<std::string>()).string()));
    SCOPED_TRACE(describe(c, src));
    const Image a = resize_like_torchvision(src, c["w"], c["h"], serial);
    const Image b = resize_like_torchvision(src, c["w"], c["h"], pooled);
    ASSERT_EQ(a.size_bytes(), b.size_bytes());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size_bytes()), 0);
  }
}
