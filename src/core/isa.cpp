#include "core/isa.h"

#include "core/cpu.h"

namespace mmrt {

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return "portable";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Bf16:
      return "avx512bf16";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  if (name == "portable" || name == "scalar") return Isa::kPortable;
  if (name == "avx2") return Isa::kAvx2;
  if (name == "avx512") return Isa::kAvx512;
  if (name == "avx512bf16") return Isa::kAvx512Bf16;
  return std::nullopt;
}

bool isa_supported(Isa isa) {
  const CpuFeatures& c = cpu_features();
  switch (isa) {
    case Isa::kPortable:
      return true;
    case Isa::kAvx2:
      return c.has_avx2();
    case Isa::kAvx512:
      return c.has_avx512();
    case Isa::kAvx512Bf16:
      return c.has_avx512bf16();
  }
  return false;
}

Isa best_isa() {
  for (Isa i : {Isa::kAvx512Bf16, Isa::kAvx512, Isa::kAvx2})
    if (isa_supported(i)) return i;
  return Isa::kPortable;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16})
    if (isa_supported(i)) v.push_back(i);
  return v;
}

}  // namespace mmrt
