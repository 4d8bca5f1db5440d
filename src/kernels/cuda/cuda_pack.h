// Internal to the CUDA backend: weight packing, a plain C++ file (it drives the CPU backend's
// packing on the host). Not a public header.
#pragma once

#include <span>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/linear.h"

namespace mmrt::kernels::cuda {

// PackedLinear::pack_concat for the CUDA backend `be`: packed by `host` (a CPU backend), then
// uploaded.
PackedLinear pack_linear(const Backend& be, const Backend& host, std::span<const Tensor* const> ws,
                         std::span<const Tensor* const> biases, WeightFormat fmt);

}  // namespace mmrt::kernels::cuda
