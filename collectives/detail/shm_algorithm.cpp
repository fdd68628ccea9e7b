// ShmAlgorithm: dispatches each collective to its shared-memory implementation.

#include "mpitrain/collectives/detail/shm_algorithm.hpp"

#include <fmt/format.h>

#include "mpitrain/collectives/detail/shm_collectives.hpp"
#include "mpitrain/collectives/detail/shm_segment.hpp"

namespace mpitrain::detail {

bool ShmAlgorithm::implements(Collective op) const noexcept {
  return op == Collective::allreduce || op == Collective::reduce_scatter ||
         op == Collective::allgather || op == Collective::broadcast;
}

std::string ShmAlgorithm::why_not(const CollectiveArgs& args, const CommContext& ctx) const {
  if (ctx.node_count > 1) {
    return fmt::format("the ranks span {} nodes and shm runs within one node", ctx.node_count);
  }
  if (ctx.shm == nullptr) return "this communicator has no shared-memory segment";
  if (args.op == Collective::reduce_scatter && args.count > 0) {
    // recv as block rank() of send (MPI's in-place form) included: a rank reads its own
    // block from send while it writes recv.
    const std::size_t recv_bytes = args.count * dtype_bytes(args.type);
    const auto* send = static_cast<const std::byte*>(args.send);
    const auto* recv = static_cast<const std::byte*>(args.recv);
    const std::size_t send_bytes = recv_bytes * static_cast<std::size_t>(ctx.size);
    if (recv < send + send_bytes && send < recv + recv_bytes) {
      return "send and recv must not overlap";
    }
  }
  return {};
}

std::string ShmAlgorithm::why_not_nonblocking(const CollectiveArgs&) const {
  return "shm has no nonblocking form (its steps advance only while a rank is inside the "
         "call); run the blocking form on a CommStream to overlap it";
}

void ShmAlgorithm::run(const CommContext& ctx, const CollectiveArgs& args) const {
  ShmSegment& seg = *ctx.shm;
  switch (args.op) {
    case Collective::allreduce:
      if (args.has_wire()) {
        return shm_wire_allreduce(seg, static_cast<float*>(args.recv), args.count, *args.wire,
                                  args.reduce);
      }
      return shm_allreduce(seg, args.send, args.recv, args.count, args.type, args.reduce,
                           args.all_finite);
    case Collective::reduce_scatter:
      return shm_reduce_scatter(seg, args.send, args.recv, args.count, args.type, args.reduce);
    case Collective::allgather:
      return shm_allgather(seg, args.send, args.recv, args.count, args.type);
    case Collective::broadcast:
      return shm_broadcast(seg, args.recv, args.count, args.type, args.root);
    default:
      return;
  }
}

}  // namespace mpitrain::detail
