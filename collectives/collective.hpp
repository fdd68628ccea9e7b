#pragma once
// Collective: the operations a Communicator runs, and the names of the algorithms that can
// run each of them.
//
// Algorithms are identified by name ("mpi", "ring", ...), listed in one table
// (collectives/detail/algorithm_registry.cpp). The name "default" asks the Communicator to
// choose, per call, by the rules of collectives/algorithm_selection.hpp.

#include <cstdint>
#include <string_view>
#include <vector>

namespace mpitrain {

enum class Collective : std::uint8_t {
  barrier,
  broadcast,
  allreduce,
  reduce_scatter,
  allgather,
  allgatherv,
  gather,
};

// Returns "barrier", "broadcast", "allreduce", ...
std::string_view to_string(Collective op) noexcept;
// Returns the Collective named `name` (as to_string prints it); throws std::invalid_argument
// listing the valid names.
Collective parse_collective(std::string_view name);

// The name that asks for the Communicator's choice.
inline constexpr std::string_view kDefaultAlgorithm = "default";

// Returns the names a caller may give for `op`: "default" first, then every algorithm of the
// table that implements `op`, in table order.
std::vector<std::string_view> algorithm_names(Collective op);

// Returns normally when `name` is one of algorithm_names(op); otherwise throws
// std::invalid_argument naming the collective and the valid names:
//   "unknown allreduce algorithm 'tree' (valid: default, mpi, ring, reduce_bcast)".
void require_algorithm(Collective op, std::string_view name);

}  // namespace mpitrain
