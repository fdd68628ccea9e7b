#pragma once
// bfloat16: 16-bit storage type (1 sign, 8 exponent, 7 mantissa bits), the top half of an
// IEEE float32. Conversion from float32 rounds to nearest, ties to even; NaN stays a quiet NaN.

#include <cstdint>

namespace mpitrain {

struct bfloat16 {
  std::uint16_t bits = 0;

  // Returns the value whose bit pattern is `b`.
  static constexpr bfloat16 from_bits(std::uint16_t b) noexcept { return bfloat16{b}; }
  friend constexpr bool operator==(bfloat16, bfloat16) = default;  // bitwise
};

// Returns `x` rounded to the nearest bfloat16 (ties to even; NaN -> quiet NaN, sign kept).
bfloat16 to_bfloat16(float x) noexcept;
// Returns the float32 equal to `x` (exact).
float to_float(bfloat16 x) noexcept;

}  // namespace mpitrain
