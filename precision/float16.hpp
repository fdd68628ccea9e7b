#pragma once
// float16: IEEE 754 binary16 storage type (1 sign, 5 exponent, 10 mantissa bits).
// Conversion from float32 rounds to nearest, ties to even, produces subnormals (spacing
// 2^-24 below 2^-14), overflows to inf from 65520 up (65504 is the largest finite value), and
// turns a NaN into a quiet NaN of the same sign with the top 9 payload bits kept. These are
// exactly the results of the x86 F16C instructions, which the bulk conversions in convert.hpp
// use when the CPU has them. The conversions are inline and branch-free so that loops over
// them vectorise.

#include <bit>
#include <cstdint>

namespace mpitrain {

struct float16 {
  std::uint16_t bits = 0;

  // Returns the value whose bit pattern is `b`.
  static constexpr float16 from_bits(std::uint16_t b) noexcept { return float16{b}; }
  friend constexpr bool operator==(float16, float16) = default;  // bitwise
};

namespace detail {

// Returns the float16 bit pattern nearest to the float32 whose bit pattern is `u`.
constexpr std::uint16_t float16_bits_from_float_bits(std::uint32_t u) noexcept {
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  // |x| < 2^-14 (float16 subnormal or zero): adding 0.5f places x at the spacing 2^-24 of
  // float16 subnormals, and the FPU rounds the dropped bits to nearest even; the low bits of
  // the sum are then the float16 pattern (2^-14 itself comes out as 0x0400, the smallest
  // normal). Other inputs are replaced by 0 first, so no NaN enters the arithmetic.
  const float small = abs < 0x38800000u ? std::bit_cast<float>(abs) : 0.0f;
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(small + 0.5f) - 0x3f000000u;
  // Normal: round the 13 dropped mantissa bits to nearest even, then rebias the exponent
  // (127 -> 15). A mantissa carry moves into the exponent. Unsigned wrap-around for small
  // inputs is harmless: those lanes take `subnormal`.
  const std::uint32_t normal = (abs + 0x0fffu + ((abs >> 13) & 1u) - (112u << 23)) >> 13;
  const std::uint32_t quiet_nan = 0x7e00u | ((abs >> 13) & 0x03ffu);
  std::uint32_t r = abs < 0x38800000u ? subnormal : normal;
  r = abs >= 0x477ff000u ? 0x7c00u : r;  // |x| >= 65520 (and inf) -> inf
  r = abs > 0x7f800000u ? quiet_nan : r;
  return static_cast<std::uint16_t>(sign | r);
}

// Returns the float32 bit pattern equal to the float16 with bit pattern `h` (exact); a
// signalling NaN comes back quiet, as with F16C.
constexpr std::uint32_t float_bits_from_float16_bits(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t abs = h & 0x7fffu;
  // Subnormal or zero: abs * 2^-24, exact in float32 (and a normal float32).
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(static_cast<float>(abs) * 0x1p-24f);
  const std::uint32_t normal = (abs << 13) + (112u << 23);
  const std::uint32_t special = ((abs << 13) + (224u << 23)) | (abs > 0x7c00u ? 0x00400000u : 0u);
  const std::uint32_t r = abs < 0x0400u ? subnormal : (abs >= 0x7c00u ? special : normal);
  return sign | r;
}

}  // namespace detail

// Returns `x` rounded to the nearest float16 (ties to even; overflow -> inf; NaN -> quiet NaN).
constexpr float16 to_float16(float x) noexcept {
  return float16::from_bits(detail::float16_bits_from_float_bits(std::bit_cast<std::uint32_t>(x)));
}

// Returns the float32 equal to `x` (exact; a NaN comes back quiet with its sign and payload).
constexpr float to_float(float16 x) noexcept {
  return std::bit_cast<float>(detail::float_bits_from_float16_bits(x.bits));
}

}  // namespace mpitrain
