// Internal to the CUDA backend: the encoders' attention on tensor cores (attention_tc_cuda.cu).
#pragma once

#include "kernels/attention.h"
#include "kernels/backend.h"

namespace mmrt::kernels::cuda {

// Runs `args` (strides and scale resolved) on tensor cores and returns true where it may: the
// caller allows bf16 products (args.bf16), a kFull mask, head_dim <= 128. False: nothing was done.
bool tensor_core_attention(const Backend& be, const VarlenAttentionArgs& args);

}  // namespace mmrt::kernels::cuda
