// Instruction-set levels of the CPU kernel variants, and the one dispatch template every kernel
// family uses: a single list of (level, table) pairs, best first, from which a caller picks the
// best variant at or below a cap that this CPU runs. The cap comes from the caller (a Backend,
// a test running each variant); nothing here is mutable after initialisation.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace mmrt {

// Ordered: each level implies the ones below it.
enum class Isa : uint8_t {
  kPortable,    // x86-64 baseline, no vector extensions beyond SSE2
  kAvx2,        // AVX2 + FMA + F16C
  kAvx512,      // AVX-512 F/BW/VL/DQ
  kAvx512Bf16,  // ... + AVX512-BF16
};

std::string_view isa_name(Isa isa);  // "portable", "avx2", "avx512", "avx512bf16"
// Accepts the names above ("scalar" is another name for portable); nullopt otherwise.
std::optional<Isa> parse_isa(std::string_view name);
bool isa_supported(Isa isa);        // by this CPU
Isa best_isa();                     // the highest level this CPU supports
std::vector<Isa> supported_isas();  // portable first

// The variants of one kernel family. `Table` is the family's struct of function pointers; each
// variant names the level it needs and a function returning its table. Construct once, as a
// function-local `static const`; lookups are const.
template <class Table>
class IsaVariants {
 public:
  struct Variant {
    Isa isa;
    const Table& (*table)();
  };
  // Best first; the last entry must be kPortable (it always runs).
  IsaVariants(std::initializer_list<Variant> variants) : v_(variants) {
    if (v_.empty() || v_.back().isa != Isa::kPortable)
      throw InternalError("IsaVariants: the last variant must be portable");
  }
  // The best variant whose level is <= cap and that this CPU runs.
  const Table& at_most(Isa cap) const {
    for (const Variant& x : v_)
      if (x.isa <= cap && isa_supported(x.isa)) return x.table();
    return v_.back().table();
  }
  // The variant for exactly this level, or null when the family has none or the CPU lacks it.
  const Table* exactly(Isa isa) const {
    for (const Variant& x : v_)
      if (x.isa == isa && isa_supported(isa)) return &x.table();
    return nullptr;
  }
  const Table& best() const { return at_most(Isa::kAvx512Bf16); }

 private:
  std::vector<Variant> v_;
};

}  // namespace mmrt
