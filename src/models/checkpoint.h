// Checking an opened checkpoint against the tensors a family expects, before any compute: every
// missing, unexpected, wrong-shape and unsupported-dtype tensor is listed (the first few of each,
// with counts) in one FormatError.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace mmrt::models {

struct ExpectedTensor {
  std::string name;  // as the checkpoint stores it
  Shape shape;
};

// `what` describes the layout for the message ("old-style names, tied lm_head"). Supported
// dtypes: F32, F16, BF16.
void check_checkpoint_tensors(const io::SafeTensors& st,
                              const std::vector<ExpectedTensor>& expected, const std::string& what);

// printf-style text for a line of `mmrt inspect` (cut at 319 bytes).
std::string inspect_text(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace mmrt::models
