// Internal to the CUDA backend: the encoders' attention on tensor cores (attention_tc_cuda.cu).
#pragma once

#include "kernels/attention.h"
#include "kernels/backend.h"

namespace mmrt::kernels::cuda {

// Runs `args` (strides and scale resolved) on tensor cores and returns true where it may: the
// caller allows bf16 products (args.bf16), a kFull mask, head_dim <= 128. False: nothing was done.
bool tensor_core_attention(const Backend& be, const VarlenAttentionArgs& args);

// Lets the kernel use the shared memory its largest head needs (over the 48 KB default), on the
// current device: once, when a backend is made, instead of on every call.
void allow_tensor_core_attention_smem();

}  // namespace mmrt::kernels::cuda
