// Element types of tensors and their names in safetensors / numpy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace mmrt {

enum class DType : uint8_t { kF32, kF16, kBF16, kI8, kU8, kI32, kI64 };

size_t dtype_size(DType t);
// Safetensors spelling: "F32", "F16", "BF16", "I8", "U8", "I32", "I64".
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);

// Compile-time mapping from C++ types; f16/bf16 are stored as raw uint16_t bits and have tags.
struct f16_t { uint16_t bits; };
struct bf16_t { uint16_t bits; };
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<f16_t>() { return DType::kF16; }
template <> constexpr DType dtype_of<bf16_t>() { return DType::kBF16; }
template <> constexpr DType dtype_of<int8_t>() { return DType::kI8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kU8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kI64; }

}  // namespace mmrt
