// The order in which the rows of a group take turns (collective_bench's interleaving).

#pragma once

#include <cstddef>
#include <vector>

namespace mpitrain::bench {

// Returns the order in which k rows take turns: a closed walk through the complete directed
// graph on 0..k-1 that takes every edge (a, b), a != b, exactly once (an Eulerian circuit,
// found with Hierholzer's algorithm), as its k(k-1) vertices; [0] when k is 1. Every row
// appears k-1 times and follows every other row exactly once, the walk's end included (it
// closes on its start). Deterministic: every rank derives the same order.
std::vector<std::size_t> balanced_order(std::size_t k);

}  // namespace mpitrain::bench
