#pragma once
// ShmAlgorithm ("shm"): allreduce, reduce_scatter, allgather and broadcast through the node's
// shared memory (shm_collectives.hpp over the communicator's ShmSegment), synchronised by
// sequence numbers in shared memory instead of messages. It runs when every rank of the
// communicator is on one node; across nodes it declines (the hierarchical algorithm, which
// uses it inside each node, is the multi-node path).
//
// Cost for n ranks and B bytes (allreduce): per workspace piece, 2 synchronisations (1 for
// pieces up to the symmetric size); per rank B copied in (none when the buffer was allocated
// with Communicator::allocate_shared), B/n combined from n inputs, B copied out. No MPI call
// and no message: memory bandwidth is the limit. The result is bitwise identical on every
// rank: each element is combined by one rank in rank order 0..n-1 (16-bit formats round at
// every combine, as the ring does).

#include "mpitrain/collectives/detail/algorithm.hpp"

namespace mpitrain::detail {

class ShmAlgorithm final : public Algorithm {
 public:
  std::string_view name() const noexcept override { return "shm"; }
  bool implements(Collective op) const noexcept override;
  std::string why_not(const CollectiveArgs& args, const CommContext& ctx) const override;
  std::string why_not_nonblocking(const CollectiveArgs& args) const override;
  void run(const CommContext& ctx, const CollectiveArgs& args) const override;
};

}  // namespace mpitrain::detail
