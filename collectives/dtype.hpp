#pragma once
// DType: the element types a collective moves, and ReduceOp: how it combines them.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "mpitrain/precision/bfloat16.hpp"
#include "mpitrain/precision/float16.hpp"

namespace mpitrain {

enum class DType : std::uint8_t { f32, f64, i32, i64, u8, bf16, f16 };
enum class ReduceOp : std::uint8_t { sum, avg, max, min };

// Returns the size of one element in bytes.
std::size_t dtype_bytes(DType type) noexcept;
// Returns the short name used in tables and configs: "f32", "bf16", ...
std::string_view to_string(DType type) noexcept;
// Returns "sum", "avg", "max" or "min".
std::string_view to_string(ReduceOp op) noexcept;
// Returns the DType named by `name` (as to_string prints it); throws std::invalid_argument.
DType parse_dtype(std::string_view name);
// Returns the ReduceOp named by `name`; throws std::invalid_argument.
ReduceOp parse_reduce_op(std::string_view name);

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<std::uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<float16> { static constexpr DType value = DType::f16; };
template <class T> inline constexpr DType dtype_of_v = dtype_of<std::remove_const_t<T>>::value;

}  // namespace mpitrain
