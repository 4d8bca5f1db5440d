// The CUDA backend (an NVIDIA GPU through the CUDA runtime): device discovery, device memory
// (cudaMalloc), page-locked host staging (cudaMallocHost) and counted copies on the backend's
// own stream, an op table for every family (ops_, layout_, rope_, linear_, attention_ and
// sampling_cuda.cu), and step graphs (CUDA graphs: Backend::capture_step / replay_step, every
// launch signed through cuda_internal.h's launch()). A model whose ops are not all there is
// refused at load, listing the ops it lacks (Backend::require). Built when CMake finds the CUDA
// toolkit (MMRT_CUDA).
#pragma once

#include "kernels/registry.h"

namespace mmrt::kernels::cuda {

// The registry's entry (kernels/registry.cpp).
BackendEntry backend_entry();

}  // namespace mmrt::kernels::cuda
