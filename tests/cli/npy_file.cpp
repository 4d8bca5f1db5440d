#include "npy_file.h"

#include "io/npy.h"

NpyFile read_npy_file(const std::string& path) {
  const mmrt::Tensor t = mmrt::io::read_npy(path).contiguous();
  NpyFile f;
  f.dtype = std::string(mmrt::dtype_name(t.dtype()));
  f.shape = t.shape();
  if (t.dtype() == mmrt::DType::kF32)
    f.f32.assign(t.data<float>(), t.data<float>() + t.numel());
  else if (t.dtype() == mmrt::DType::kI32)
    f.i32.assign(t.data<int32_t>(), t.data<int32_t>() + t.numel());
  return f;
}
