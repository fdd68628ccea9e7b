// The table of algorithms. Adding an algorithm: its own files and one line here.

#include "mpitrain/collectives/detail/algorithm_registry.hpp"

#include <array>

#include "mpitrain/collectives/detail/hierarchical_algorithm.hpp"
#include "mpitrain/collectives/detail/mpi_algorithm.hpp"
#include "mpitrain/collectives/detail/reduce_broadcast_algorithm.hpp"
#include "mpitrain/collectives/detail/ring_algorithm.hpp"
#include "mpitrain/collectives/detail/shm_algorithm.hpp"

namespace mpitrain::detail {
namespace {

// Algorithms hold no state: one constant instance each.
const MpiAlgorithm kMpi;
const RingAlgorithm kRing;
const ReduceBroadcastAlgorithm kReduceBroadcast;
const ShmAlgorithm kShm;
const HierarchicalAlgorithm kHierarchical;

const std::array<const Algorithm*, 5> kTable = {
    &kMpi,
    &kRing,
    &kReduceBroadcast,
    &kShm,
    &kHierarchical,
};

}  // namespace

std::span<const Algorithm* const> algorithms() noexcept { return kTable; }

const Algorithm* find_algorithm(Collective op, std::string_view name) noexcept {
  for (const Algorithm* a : kTable) {
    if (a->name() == name && a->implements(op)) return a;
  }
  return nullptr;
}

}  // namespace mpitrain::detail
