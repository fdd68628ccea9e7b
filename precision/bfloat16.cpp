#include "mpitrain/precision/bfloat16.hpp"

#include <bit>

namespace mpitrain {

bfloat16 to_bfloat16(float x) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    // NaN: keep sign and top payload bits, force the quiet bit.
    return bfloat16::from_bits(static_cast<std::uint16_t>((u >> 16) | 0x0040u));
  }
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate. Overflow
  // of the mantissa carries into the exponent, and the largest finite values round to inf.
  const std::uint32_t lsb = (u >> 16) & 1u;
  return bfloat16::from_bits(static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16));
}

float to_float(bfloat16 x) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(x.bits) << 16);
}

}  // namespace mpitrain
