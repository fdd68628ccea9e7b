#pragma once
// bfloat16: 16-bit storage type (1 sign, 8 exponent, 7 mantissa bits), the top half of an
// IEEE float32. Conversion from float32 rounds to nearest, ties to even, over the whole range
// (float32 subnormals round to bfloat16 subnormals, values past the largest finite bfloat16
// round to inf); a NaN stays a NaN of the same sign, made quiet, with its top payload bits.
// The conversions are inline and branch-free so that loops over them vectorise; the bulk
// versions are in convert.hpp.

#include <bit>
#include <cstdint>

namespace mpitrain {

struct bfloat16 {
  std::uint16_t bits = 0;

  // Returns the value whose bit pattern is `b`.
  static constexpr bfloat16 from_bits(std::uint16_t b) noexcept { return bfloat16{b}; }
  friend constexpr bool operator==(bfloat16, bfloat16) = default;  // bitwise
};

namespace detail {

// Returns the bfloat16 bit pattern nearest to the float32 whose bit pattern is `u`.
constexpr std::uint16_t bfloat16_bits_from_float_bits(std::uint32_t u) noexcept {
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate. A mantissa
  // carry moves into the exponent, so values past the largest finite bfloat16 become inf,
  // and inf stays inf (its low half is zero).
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  // NaN: keep sign and top payload bits, set the quiet bit (so the result cannot become inf).
  const std::uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// Returns the float32 bit pattern equal to the bfloat16 with bit pattern `b`; a signalling
// NaN comes back quiet (as F16C does for float16, so that every conversion quiets NaNs).
constexpr std::uint32_t float_bits_from_bfloat16_bits(std::uint16_t b) noexcept {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  return (b & 0x7fffu) > 0x7f80u ? (u | 0x00400000u) : u;
}

}  // namespace detail

// Returns `x` rounded to the nearest bfloat16 (ties to even; NaN -> quiet NaN, sign kept).
constexpr bfloat16 to_bfloat16(float x) noexcept {
  return bfloat16::from_bits(detail::bfloat16_bits_from_float_bits(std::bit_cast<std::uint32_t>(x)));
}

// Returns the float32 equal to `x` (exact; a NaN comes back quiet with its sign and payload).
constexpr float to_float(bfloat16 x) noexcept {
  return std::bit_cast<float>(detail::float_bits_from_bfloat16_bits(x.bits));
}

}  // namespace mpitrain
