#include "balanced_order.hpp"

#include <algorithm>

namespace mpitrain::bench {

std::vector<std::size_t> balanced_order(std::size_t k) {
  if (k <= 1) return {0};
  std::vector<std::vector<std::size_t>> unused(k);  // out-edges not taken, smallest last
  for (std::size_t a = 0; a < k; ++a) {
    for (std::size_t b = k; b-- > 0;) {
      if (b != a) unused[a].push_back(b);
    }
  }
  std::vector<std::size_t> path{0};
  std::vector<std::size_t> circuit;
  while (!path.empty()) {
    const std::size_t v = path.back();
    if (unused[v].empty()) {
      circuit.push_back(v);
      path.pop_back();
    } else {
      path.push_back(unused[v].back());
      unused[v].pop_back();
    }
  }
  std::reverse(circuit.begin(), circuit.end());
  circuit.pop_back();  // the circuit ends where it began
  return circuit;
}

}  // namespace mpitrain::bench
