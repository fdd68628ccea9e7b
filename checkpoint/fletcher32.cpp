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

// Four 32-bit lanes (GCC/Clang vector extensions; 16 bytes, so SSE2 keeps them in
// registers). Loaded from 8 little-endian 16-bit words, lane k holds word 2k in its low half
// and word 2k + 1 in its high half.
using Lanes4 = std::uint32_t __attribute__((vector_size(16)));

// Adds `words` 16-bit words at p to (sum1, sum2) as HDF5's inner loop would.
inline void add_block(const unsigned char* p, std::size_t words, std::uint32_t& sum1,
                      std::uint32_t& sum2) noexcept {
  const std::size_t steps = words / kLanes;
  const Lanes4 low_half = {0xffff, 0xffff, 0xffff, 0xffff};
  const Lanes4 low_bytes = {0x00ff00ff, 0x00ff00ff, 0x00ff00ff, 0x00ff00ff};
  Lanes4 s_even = {};  // sums of words 0, 2, 4, 6 of each group of 8
  Lanes4 s_odd = {};   // sums of words 1, 3, 5, 7
  Lanes4 b_even = {};  // sums of the running sums
  Lanes4 b_odd = {};
  for (std::size_t j = 0; j < steps; ++j) {
    Lanes4 v;
    std::memcpy(&v, p + 2 * kLanes * j, sizeof v);
    // Swap the bytes of both 16-bit halves: the words are big-endian.
    v = ((v & low_bytes) << 8) | ((v >> 8) & low_bytes);
    s_even += v & low_half;
    s_odd += v >> 16;
    b_even += s_even;
    b_odd += s_odd;
  }
  const auto counted = static_cast<std::uint32_t>(steps * kLanes);
  std::uint32_t total = 0;
  std::uint32_t weighted = 0;
  for (std::uint32_t k = 0; k < 4; ++k) {
    total += s_even[k] + s_odd[k];
    weighted += static_cast<std::uint32_t>(kLanes) * (b_even[k] + b_odd[k]) - 2 * k * s_even[k] -
                (2 * k + 1) * s_odd[k];
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
