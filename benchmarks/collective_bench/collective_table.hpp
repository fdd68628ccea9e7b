// The collectives collective_bench measures (--op), one descriptor each, listed once.

#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "descriptor.hpp"

namespace mpitrain::bench {

// Returns the names of the collectives in table order, joined by `separator`.
std::string collective_names(std::string_view separator);

// Returns the descriptor of the collective named `op`; throws std::invalid_argument listing
// the valid names.
std::unique_ptr<CollectiveDescriptor> make_descriptor(std::string_view op);

// Returns the algorithm names each collective offers, as "allreduce: default, mpi, ring; ..."
// (for --help).
std::string algorithm_names_by_collective();

}  // namespace mpitrain::bench
