// Internal: per-ISA conversion tables (see convert.cpp). Not a public header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/isa.h"

namespace mmrt::detail {

struct ConvertFns {
  const char* isa;
  void (*f32_to_f16)(const float*, uint16_t*, size_t);
  void (*f16_to_f32)(const uint16_t*, float*, size_t);
  void (*f32_to_bf16)(const float*, uint16_t*, size_t);
  void (*bf16_to_f32)(const uint16_t*, float*, size_t);
};

const ConvertFns& convert_fns_scalar();
const ConvertFns& convert_fns_avx2();
const ConvertFns& convert_fns_avx512();
// Every variant, best first (tests run each one the CPU supports).
const IsaVariants<ConvertFns>& convert_variants();

}  // namespace mmrt::detail
