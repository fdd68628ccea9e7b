// The closed-form data of collective_bench --check: rank r contributes
// v(r, i) = ((i + 3 r) mod 7) - 3 at element i, small integers whose sums over up to 85 ranks
// (|sum| <= 256) are exact in every type, bf16 included.

#pragma once

#include <cstddef>

#include "mpitrain/collectives/dtype.hpp"

namespace mpitrain::bench {

// Returns v(rank, i).
double value(int rank, std::size_t i);
// Returns the sum of v(r, i) over ranks r = 0 .. nranks-1.
double expected_sum(int nranks, std::size_t i);

// Writes v, converted to `type`, into element i of buf (an array of `type`).
void store(std::byte* buf, std::size_t i, DType type, double v);
// Returns element i of buf (an array of `type`) as a double.
double load(const std::byte* buf, std::size_t i, DType type);

// Writes v(rank, first + i) into elements i = 0 .. count-1 of buf.
void store_values(std::byte* buf, std::size_t count, DType type, int rank, std::size_t first);

}  // namespace mpitrain::bench
