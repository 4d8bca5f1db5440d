#include "core/dtype.h"

namespace mmrt {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
// One table: every dtype listed once.
constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2},
    {DType::kI8, "I8", 1},   {DType::kU8, "U8", 1},   {DType::kI32, "I32", 4},
    {DType::kI64, "I64", 8},
};
}  // namespace

size_t dtype_size(DType t) { return kDTypes[static_cast<int>(t)].size; }
std::string_view dtype_name(DType t) { return kDTypes[static_cast<int>(t)].name; }
std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& d : kDTypes)
    if (d.name == name) return d.type;
  return std::nullopt;
}

}  // namespace mmrt
