// RingAlgorithm: dispatches to the ring allreduce of one type or to the fused wire ring.

#include "mpitrain/collectives/detail/ring_algorithm.hpp"

#include "mpitrain/collectives/detail/ring_allreduce.hpp"
#include "mpitrain/collectives/detail/wire_ring_allreduce.hpp"

namespace mpitrain::detail {

std::string RingAlgorithm::why_not_nonblocking(const CollectiveArgs&) const {
  return "the ring has no nonblocking form (its rounds would advance only inside this "
         "request's test()/wait()); use algorithm mpi or default, or run the blocking "
         "allreduce with the ring on a CommStream to overlap it";
}

void RingAlgorithm::run(const CommContext& ctx, const CollectiveArgs& args) const {
  if (args.has_wire()) {
    wire_ring_allreduce(ctx.comm, ctx.rank, ctx.size, static_cast<float*>(args.recv),
                        args.wire_scratch, args.count, *args.wire, args.reduce,
                        kRingSegmentBytes, ctx.timeout);
    return;
  }
  ring_allreduce(ctx.comm, ctx.rank, ctx.size, args.send, args.recv, args.count, args.type,
                 args.reduce, kRingSegmentBytes, ctx.timeout);
}

}  // namespace mpitrain::detail
