#include "mpitrain/checkpoint/fletcher32.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace mpitrain::checkpoint {
namespace {

constexpr std::size_t kLanes = 8;
constexpr std::size_t kBlockWords = 360;  // HDF5's reduction period (no overflow in 32 bits)

// Returns the big-endian 16-bit word at p (HDF5 sums data[0] << 8 | data[1]).
inline std::uint32_t word_at(const unsigned char* p) noexcept {
  std::uint16_t w;
  std::memcpy(&w, p, sizeof w);
  return static_cast<std::uint16_t>((w << 8) | (w >> 8));
}

// Eight 16-bit lanes, and four 32-bit lanes (GCC/Clang vector extensions; 16 bytes, so
// SSE2 keeps them in registers).
using Words8 = std::uint16_t __attribute__((vector_size(16)));
using Sums4 = std::uint32_t __attribute__((vector_size(16)));

// Adds `words` 16-bit words at p to (sum1, sum2) as HDF5's inner loop would.
inline void add_block(const unsigned char* p, std::size_t words, std::uint32_t& sum1,
                      std::uint32_t& sum2) noexcept {
  const std::size_t steps = words / kLanes;
  const Words8 zero = {};
  Sums4 s_lo = {};  // lanes 0-3 of each group of 8 words
  Sums4 s_hi = {};  // lanes 4-7
  Sums4 b_lo = {};
  Sums4 b_hi = {};
  for (std::size_t j = 0; j < steps; ++j) {
    Words8 w;
    std::memcpy(&w, p + 2 * kLanes * j, sizeof w);
    w = (w << 8) | (w >> 8);  // big-endian words
    // Zero-extend to 32 bits (little-endian lane order): interleave with zeros.
    const Words8 lo = __builtin_shufflevector(w, zero, 0, 8, 1, 9, 2, 10, 3, 11);
    const Words8 hi = __builtin_shufflevector(w, zero, 4, 12, 5, 13, 6, 14, 7, 15);
    Sums4 x_lo;
    Sums4 x_hi;
    std::memcpy(&x_lo, &lo, sizeof x_lo);
    std::memcpy(&x_hi, &hi, sizeof x_hi);
    s_lo += x_lo;
    s_hi += x_hi;
    b_lo += s_lo;
    b_hi += s_hi;
  }
  const auto counted = static_cast<std::uint32_t>(steps * kLanes);
  std::uint32_t total = 0;
  std::uint32_t weighted = 0;
  for (std::uint32_t l = 0; l < 4; ++l) {
    total += s_lo[l] + s_hi[l];
    weighted += static_cast<std::uint32_t>(kLanes) * (b_lo[l] + b_hi[l]) - l * s_lo[l] -
                (l + 4) * s_hi[l];
  }
  sum2 += counted * sum1 + weighted;
  sum1 += total;
  for (std::size_t i = steps * kLanes; i < words; ++i) {
    sum1 += word_at(p + 2 * i);
    sum2 += sum1;
  }
}

}  // namespace

std::uint32_t fletcher32(std::span<const unsigned char> data) noexcept {
  const unsigned char* p = data.data();
  std::size_t words = data.size() / 2;
  std::uint32_t sum1 = 0;
  std::uint32_t sum2 = 0;
  while (words > 0) {
    const std::size_t n = std::min(words, kBlockWords);
    add_block(p, n, sum1, sum2);
    p += 2 * n;
    words -= n;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (data.size() % 2 != 0) {
    sum1 += static_cast<std::uint32_t>(*p) << 8;
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

}  // namespace mpitrain::checkpoint
