// Packing linear weights for the CUDA backend: the CPU backend's packing on the host (the same
// conversion and int8 quantisation, bit for bit, always row-major), then one upload of weights,
// scales and bias into device memory.
#include <span>

#include "core/error.h"
#include "kernels/cuda/cuda_pack.h"
#include "kernels/linear.h"

namespace mmrt::kernels::cuda {

PackedLinear pack_linear(const Backend& be, const Backend& host, std::span<const Tensor* const> ws,
                         std::span<const Tensor* const> biases, WeightFormat fmt) {
  // kCopy: row-major on any CPU variant (the host backend is capped below AVX512-BF16, whose
  // blocked layout the CUDA kernels do not read).
  const PackedLinear h = PackedLinear::pack_concat(host, ws, biases, fmt, WeightPlacement::kCopy);
  if (h.blocked()) throw InternalError("cuda pack: the host packed a blocked layout");
  PackedLinear::Parts p;
  p.fmt = fmt;
  p.in = h.in();
  p.out = h.out();
  p.device = be.device();
  const size_t wbytes = static_cast<size_t>(h.in() * h.out()) * weight_format_bytes(fmt);
  p.w_owner = be.allocate(wbytes);
  p.w = p.w_owner.get();
  be.copy_to_device(p.w_owner.get(), h.weight_data(), wbytes);
  const size_t vbytes = static_cast<size_t>(h.out()) * sizeof(float);
  if (h.scales()) {
    p.scale = be.allocate(vbytes);
    be.copy_to_device(p.scale.get(), h.scales(), vbytes);
  }
  if (h.bias()) {
    p.bias = be.allocate(vbytes);
    be.copy_to_device(p.bias.get(), h.bias(), vbytes);
  }
  return PackedLinear(std::move(p));
}

}  // namespace mmrt::kernels::cuda
