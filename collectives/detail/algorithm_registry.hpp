#pragma once
// The table of algorithms (internal to collectives/): every algorithm the Communicator can run,
// in the order lists show them.

#include <span>
#include <string_view>

#include "mpitrain/collectives/detail/algorithm.hpp"

namespace mpitrain::detail {

// Returns every algorithm, in table order.
std::span<const Algorithm* const> algorithms() noexcept;
// Returns the algorithm called `name` that implements `op`, or nullptr.
const Algorithm* find_algorithm(Collective op, std::string_view name) noexcept;

}  // namespace mpitrain::detail
