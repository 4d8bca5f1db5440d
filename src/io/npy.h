// Minimal NumPy .npy (format 1.0/2.0/3.0) reading and writing for contiguous little-endian
// tensors: f32, f16, i8, u8, i32, i64 (bf16 has no numpy type and is refused).
#pragma once

#include <string>

#include "core/tensor.h"

namespace mmrt::io {

// Writes `t` (made contiguous) as a C-order .npy file. Throws InvalidArgument for bf16 and
// NotFound when the file cannot be created.
void write_npy(const std::string& path, const Tensor& t);

// Reads a C-order little-endian .npy file. Throws NotFound / FormatError / Unimplemented.
Tensor read_npy(const std::string& path);

}  // namespace mmrt::io
