#include "mpitrain/precision/float16.hpp"

#include <bit>

namespace mpitrain {

float16 to_float16(float x) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: keep the top payload bits, force the quiet bit
    return float16::from_bits(static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu)));
  }
  if (abs >= 0x477ff000u) {  // >= 65520 rounds to inf (and inf stays inf)
    return float16::from_bits(static_cast<std::uint16_t>(sign | 0x7c00u));
  }
  if (abs < 0x38800000u) {  // below 2^-14: subnormal or zero
    // Add 0.5 in float: the FPU's round-to-nearest-even aligns the bits for us; the result's
    // low mantissa bits are the float16 subnormal.
    const float shifted = std::bit_cast<float>(abs) + 0.5f;
    return float16::from_bits(
        static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(shifted) - 0x3f000000u)));
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped bits to nearest even.
  const std::uint32_t lsb = (abs >> 13) & 1u;
  const std::uint32_t rounded = abs + 0xfffu + lsb - (112u << 23);
  return float16::from_bits(static_cast<std::uint16_t>(sign | (rounded >> 13)));
}

float to_float(float16 x) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(x.bits & 0x8000u) << 16;
  const std::uint32_t exp = (x.bits >> 10) & 0x1fu;
  const std::uint32_t man = x.bits & 0x3ffu;
  if (exp == 0x1fu) {  // inf or NaN
    return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  }
  if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in float
    const float magnitude = static_cast<float>(man) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

}  // namespace mpitrain
