#pragma once
// float16: IEEE 754 binary16 storage type (1 sign, 5 exponent, 10 mantissa bits).
// Conversion from float32 rounds to nearest, ties to even, produces subnormals, overflows to
// inf from 65520 up, and keeps NaN a quiet NaN.

#include <cstdint>

namespace mpitrain {

struct float16 {
  std::uint16_t bits = 0;

  // Returns the value whose bit pattern is `b`.
  static constexpr float16 from_bits(std::uint16_t b) noexcept { return float16{b}; }
  friend constexpr bool operator==(float16, float16) = default;  // bitwise
};

// Returns `x` rounded to the nearest float16 (ties to even; overflow -> inf; NaN -> quiet NaN).
float16 to_float16(float x) noexcept;
// Returns the float32 equal to `x` (exact).
float to_float(float16 x) noexcept;

}  // namespace mpitrain
