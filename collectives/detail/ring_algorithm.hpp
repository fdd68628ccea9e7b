#pragma once
// RingAlgorithm ("ring"): allreduce around a ring of point-to-point messages
// (ring_allreduce.hpp); fp32 data with a 16-bit wire runs the fused ring
// (wire_ring_allreduce.hpp), which converts inside the combining loop.
//
// Cost for n ranks and B bytes as sent: 2(n-1) steps, 2(n-1)/n * B bytes sent and received per
// rank, (n-1)/n * B bytes combined. No nonblocking form: the ring's rounds are dependent
// messages that MPI knows nothing of, so they would advance only inside the Request's
// test()/wait(), and a rank blocked elsewhere would stall its neighbours; CommStream runs the
// blocking ring on its worker thread instead.

#include "mpitrain/collectives/detail/algorithm.hpp"

namespace mpitrain::detail {

class RingAlgorithm final : public Algorithm {
 public:
  std::string_view name() const noexcept override { return "ring"; }
  bool implements(Collective op) const noexcept override { return op == Collective::allreduce; }
  std::string why_not_nonblocking(const CollectiveArgs& args) const override;
  void run(const CommContext& ctx, const CollectiveArgs& args) const override;
};

}  // namespace mpitrain::detail
