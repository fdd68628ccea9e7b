#pragma once
// ReduceBroadcastAlgorithm ("reduce_bcast"): allreduce as MPI_Reduce to rank 0 followed by
// MPI_Bcast from it. Mostly a reference: it is the textbook composition, and the proof that
// an algorithm is its own files, one line in the table of algorithm_registry.cpp and its
// test. Written as an MPI plan (mpi_plan.hpp). No nonblocking form: the broadcast reads what
// the reduce wrote, and posted calls may progress in any order.
//
// Cost for n ranks and B bytes: two collectives in sequence; with MPI's tree algorithms
// 2 log2(n) message latencies and up to 2 log2(n) * B bytes through rank 0 (not
// bandwidth-optimal: the ring and MPI's own allreduce move 2(n-1)/n * B per rank). Averages
// divide on every rank after the broadcast; 16-bit averages reduce and broadcast fp32 sums
// (twice the bytes) and divide before the only rounding.

#include "mpitrain/collectives/detail/algorithm.hpp"

namespace mpitrain::detail {

class ReduceBroadcastAlgorithm final : public Algorithm {
 public:
  std::string_view name() const noexcept override { return "reduce_bcast"; }
  bool implements(Collective op) const noexcept override { return op == Collective::allreduce; }
  std::string why_not_nonblocking(const CollectiveArgs& args) const override;
  void run(const CommContext& ctx, const CollectiveArgs& args) const override;
};

}  // namespace mpitrain::detail
