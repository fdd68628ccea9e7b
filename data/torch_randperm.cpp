#include "mpitrain/data/torch_randperm.hpp"

#include <numeric>
#include <random>
#include <utility>

namespace mpitrain::data {

std::vector<std::size_t> torch_randperm(std::size_t n, std::uint64_t seed) {
  std::vector<std::size_t> perm(n);
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  if (n < 2) return perm;
  // std::mt19937 seeded with a 32-bit value runs the same init_genrand recurrence and
  // tempering as at::mt19937, so both produce the same 32-bit stream.
  std::mt19937 engine(static_cast<std::uint32_t>(seed & 0xffffffffu));
  for (std::size_t i = 0; i + 1 < n; ++i) {
    const std::size_t draw = static_cast<std::uint32_t>(engine());
    const std::size_t z = draw % (n - i);
    std::swap(perm[i], perm[i + z]);
  }
  return perm;
}

}  // namespace mpitrain::data
