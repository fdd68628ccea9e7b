#pragma once
// Bit-pattern helpers shared by the precision tests.

#include <bit>
#include <cstdint>
#include <cstdio>
#include <string>

namespace mpitrain::test {

// Returns `bits` as 0x-prefixed hex with `digits` digits, for failure messages.
inline std::string hex(std::uint32_t bits, int digits = 8) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%0*x", digits, static_cast<unsigned>(bits));
  return text;
}

inline std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }
inline float float_of(std::uint32_t bits) { return std::bit_cast<float>(bits); }

// NaN tests per format: exponent all ones and a nonzero mantissa; quiet = top mantissa bit.
inline bool is_nan32(std::uint32_t b) { return (b & 0x7fffffffu) > 0x7f800000u; }
inline bool is_quiet_nan32(std::uint32_t b) { return is_nan32(b) && (b & 0x00400000u) != 0; }
inline bool is_nan_f16(std::uint16_t b) { return (b & 0x7fffu) > 0x7c00u; }
inline bool is_quiet_nan_f16(std::uint16_t b) { return is_nan_f16(b) && (b & 0x0200u) != 0; }
inline bool is_nan_bf16(std::uint16_t b) { return (b & 0x7fffu) > 0x7f80u; }
inline bool is_quiet_nan_bf16(std::uint16_t b) { return is_nan_bf16(b) && (b & 0x0040u) != 0; }

}  // namespace mpitrain::test
