#pragma once
// HierarchicalAlgorithm ("hierarchical"): allreduce across nodes in three stages, the Horovod
// pattern: reduce-scatter inside each node through its shared memory, allreduce of each local
// shard among the ranks that share a local rank across nodes (CommContext::cross), allgather
// inside the node. Only 1/local_size of the buffer crosses the network per rank (all of it
// at one rank per node), and every rank's link carries traffic at once. fp32 data on a
// 16-bit wire is rounded to the wire type first (Algorithm::run_wire_by_conversion): the
// inter-node bytes are 16-bit, summed in fp32.
//
// At 2 nodes of one rank each there is nothing to share in a node: the two ranks exchange their
// whole buffers and combine them as the chunks arrive (a pairwise exchange that keeps the
// link busier than Open MPI's allreduce there).
//
// It declines on one node (shm is the path there), with one rank per node on more than 2 nodes
// (the ring is then the same exchange), when the nodes hold different numbers of ranks, and for
// the nonblocking form (its shared-memory stages advance only inside the call).
// Cost, reduction order and rounding: hierarchical_algorithm.cpp.

#include "mpitrain/collectives/detail/algorithm.hpp"

namespace mpitrain::detail {

class HierarchicalAlgorithm final : public Algorithm {
 public:
  std::string_view name() const noexcept override { return "hierarchical"; }
  bool implements(Collective op) const noexcept override { return op == Collective::allreduce; }
  std::string why_not(const CollectiveArgs& args, const CommContext& ctx) const override;
  std::string why_not_nonblocking(const CollectiveArgs& args) const override;
  void run(const CommContext& ctx, const CollectiveArgs& args) const override;
};

}  // namespace mpitrain::detail
