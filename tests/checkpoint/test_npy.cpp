// .npy writing and reading: round trips, and numpy itself reading what we write.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "io/npy.h"

using namespace mmrt;
using namespace mmrt::io;
namespace fs = std::filesystem;

TEST(Npy, RoundTripAndNumpyReadsIt) {
  fs::path dir = fs::path(MMRT_BINARY_DIR) / "tests" / "checkpoint" / "npy";
  fs::create_directories(dir);
  Tensor f = Tensor::empty(DType::kF32, {3, 5});
  for (int i = 0; i < 15; ++i) f.data<float>()[i] = i * 0.5f - 2.0f;
  Tensor g = Tensor::empty(DType::kI64, {1, 3});
  g.data<int64_t>()[0] = 1, g.data<int64_t>()[1] = 34, g.data<int64_t>()[2] = 46;
  Tensor v = Tensor::empty(DType::kU8, {7});
  for (int i = 0; i < 7; ++i) v.data<uint8_t>()[i] = static_cast<uint8_t>(250 + i);
  write_npy((dir / "f.npy").string(), f);
  write_npy((dir / "g.npy").string(), g);
  write_npy((dir / "v.npy").string(), v);
  Tensor f2 = read_npy((dir / "f.npy").string());
  ASSERT_EQ(f2.shape(), f.shape());
  for (int i = 0; i < 15; ++i) EXPECT_EQ(f2.data<float>()[i], f.data<float>()[i]);
  Tensor g2 = read_npy((dir / "g.npy").string());
  EXPECT_EQ(g2.dtype(), DType::kI64);
  EXPECT_EQ(g2.data<int64_t>()[1], 34);
  EXPECT_EQ(read_npy((dir / "v.npy").string()).shape(), Shape{7});
  // numpy agrees on dtype, shape and values.
  const std::string cmd = std::string(MMRT_REF_PYTHON) +
                          " -c \"import numpy as np, sys; d=sys.argv[1];"
                          " f=np.load(d+'/f.npy'); g=np.load(d+'/g.npy'); v=np.load(d+'/v.npy');"
                          " assert f.dtype==np.float32 and f.shape==(3,5) and f[2,4]==5.0;"
                          " assert g.dtype==np.int64 and g.tolist()==[[1,34,46]];"
                          " assert v.dtype==np.uint8 and v.shape==(7,) and v[6]==0\" " +
                          dir.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_THROW(read_npy((dir / "missing.npy").string()), NotFound);
  EXPECT_THROW(write_npy((dir / "b.npy").string(), Tensor::empty(DType::kBF16, {2})),
               InvalidArgument);
}
