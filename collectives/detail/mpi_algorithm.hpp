#pragma once
// MpiAlgorithm ("mpi"): every collective through MPI's own calls, on the caller's buffers.
// The blocking and nonblocking forms run one plan (mpi_plan.hpp) per collective.
//
// Cost: whatever the MPI library's algorithm costs; plus, for 16-bit averages, one widening
// pass to fp32 before and one narrowing pass after (the sum is staged in fp32 so the division
// happens before the only rounding), and twice the bytes on the wire.
//
// Splitting: every call hands MPI at most ctx.max_call elements. allreduce and broadcast loop
// over pieces; reduce_scatter, allgather, allgatherv and gather, whose per-rank blocks cannot
// be split in place, fall back to one reduce/broadcast per rank (point-to-point for gather)
// when a block or the total exceeds the limit.

#include "mpitrain/collectives/detail/algorithm.hpp"

namespace mpitrain::detail {

class MpiAlgorithm final : public Algorithm {
 public:
  std::string_view name() const noexcept override { return "mpi"; }
  bool implements(Collective) const noexcept override { return true; }
  std::string why_not_nonblocking(const CollectiveArgs& args) const override;
  void run(const CommContext& ctx, const CollectiveArgs& args) const override;
  Request post(const CommContext& ctx, const CollectiveArgs& args) const override;
};

}  // namespace mpitrain::detail
